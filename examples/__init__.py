"""Small agents built on turnstile, each tested offline against a recorded conversation."""
