"""The hostile-input corpus's parts (scripts/hostile_corpus.py is the entry point): `formats`
writes the files (safetensors, GGUF, images) the cases corrupt; `cases_files` the model-file
cases (GGUF, safetensors, config, processor); `cases_inputs` the rest (tokenizer, image, prompt,
mmproj pairs, flags)."""
