"""``gpudoctor tune``: measured auto-tuning of batch, loader, precision, GradScaler and DDP settings.

``tune(["all"], target_ref="mytrain:target", out="tuned.toml")`` (see ``docs/tune.md``). The
search strategies (:mod:`.search`) are pure; every setting is decided by real trials
(:mod:`.trials`), never by a rule of thumb.
"""
