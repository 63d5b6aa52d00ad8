"""Population characterization: Jobs x Scenarios through the step-time model, then aggregates.

The PAI study's (IISWC 2019) cluster-level questions, reconstructed: communication's average share
of execution time, how many PS/Worker jobs an architecture port would speed up, what a network
upgrade buys on average.
"""
