"""Core: presets and typed configs, file I/O, manifests, the event loop, answer metrics and the chat protocol."""
