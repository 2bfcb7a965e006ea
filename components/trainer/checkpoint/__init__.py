"""Importing Hugging Face checkpoints (GPT-2 and Llama families) into the backbone: config.json
(`hf_config`), safetensors weights read tensor by tensor (`safetensors_files`) and the mapping of
their names onto the backbone's variables (`hf_weights`)."""
