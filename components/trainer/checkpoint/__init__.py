"""Hugging Face checkpoints in and out of the backbone (GPT-2 and Llama families): config.json
(`hf_config`), safetensors weights read tensor by tensor (`safetensors_files`), the mapping of
their names onto the backbone's variables (`hf_weights`), a fine-tuned model written back in that
layout (`hf_export`), and the checkpoint's fingerprint for lineage (`fingerprint`)."""
