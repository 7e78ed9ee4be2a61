"""Learning from what follows an answer: reward fusion, implicit signals, corrections from chat."""
