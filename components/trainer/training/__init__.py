"""Training: the TFX Trainer's run_fn, the loop and its inputs, optimizer, distribution and TFJobs."""
