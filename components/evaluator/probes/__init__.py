"""Gate families that prompt the model and judge what it generates: safety, memorisation, bias,
chat replies and instruction following, how a chat model is prompted, and the cache of probe
results."""
