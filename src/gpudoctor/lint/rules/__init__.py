"""One module per lint rule; ``gpudoctor.lint.registry.ALL_RULES`` lists them."""
