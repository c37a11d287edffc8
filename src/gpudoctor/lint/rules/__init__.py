"""One module per lint rule; ``gpudoctor.lint.registry.ALL_RULES`` finds every ``gdNNN_*`` module here."""
