"""A script that never imports JAX: what ``jaxmemprof run`` costs before and
around a program that has no device memory (its fixed start-up)."""
print(1)
