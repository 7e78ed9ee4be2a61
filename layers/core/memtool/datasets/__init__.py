"""Public benchmark data sets, built on this machine into an embedded warehouse (TPC-H, for now).

Only the command line uses them: they prove the question compiler on a domain other than the demo's.
"""
