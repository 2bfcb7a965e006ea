"""Serving: the exported SavedModel, its signature contract, the client and TF Serving requests."""
