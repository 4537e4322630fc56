"""Simulated crowds and "simulate before you pay" (issue 14): a stand-in P_D with a known
EB-C, annotator behaviours, and R replications of a study's own design through the
results functions. Pure numpy; no database, no torch."""
