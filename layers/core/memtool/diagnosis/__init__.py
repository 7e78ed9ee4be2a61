"""Diagnosis: classify a failure, form hypotheses, test each by running its repair, keep the verified lesson."""
