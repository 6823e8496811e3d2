"""A weather agent: one tool, one loop spec, tested with turnstile's pytest plugin."""
