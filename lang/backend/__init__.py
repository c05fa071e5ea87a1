"""Backends of the frontend language: an HTTP server (RuntimeEndpoint) or an in-process Engine."""
