"""``gpudoctor fix``: a run's findings turned into small, commented source changes, each kept only
when it measured faster.

- :mod:`gpudoctor.fix.locate` finds, statically, the code the findings are about: the training loop
  (the loop that calls ``.backward()`` and steps the optimizer), the DataLoader it iterates, the
  forward and loss of the model that optimizer trains, the batch copies to the device;
- :mod:`gpudoctor.fix.methods` resolves a trainer class's step (``self.model``, a step helper, a
  ``while`` loop over ``next(iter(loader))``); :mod:`gpudoctor.fix.project` finds the loop in another
  module of the script's project (``from mingpt.trainer import Trainer``), the file then patched;
- :mod:`gpudoctor.fix.metrics` finds the per-step metric reads that can wait for the print;
- :mod:`gpudoctor.fix.plan` turns findings (and the lint fixes) into :class:`~gpudoctor.fix.ops.Change`
  objects, each a few located edits with the finding's code and why;
- :mod:`gpudoctor.fix.loader` puts the loader change's keywords where the user controls them: a
  keyword read from the script's own flag (:mod:`gpudoctor.fix.options`: ``num_workers=args.workers``
  and ``-j/--workers``) gets that option's default, and a command line that sets the flag is
  measured with the new value;
- :mod:`gpudoctor.fix.edit` applies changes with libcst, every other byte of the file kept;
- :mod:`gpudoctor.fix.view` renders the diff, the before/after table and the loss comparison.

Running and measuring is the command's (:mod:`gpudoctor.cli.fix`, through ``run``'s machinery).
"""
