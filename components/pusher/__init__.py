"""Pusher: atomic, versioned publication of blessed SavedModels for TF Serving."""
