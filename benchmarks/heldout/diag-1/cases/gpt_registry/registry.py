"""Name -> builder registries so experiments can be described by config dicts."""


class Registry:
    def __init__(self, name):
        self.name = name
        self._items = {}

    def register(self, key=None):
        def deco(obj):
            self._items[key or obj.__name__] = obj
            return obj
        return deco

    def build(self, cfg, **extra):
        cfg = dict(cfg)
        kind = cfg.pop("type")
        if kind not in self._items:
            raise KeyError(f"{kind!r} is not a registered {self.name}; have {sorted(self._items)}")
        return self._items[kind](**cfg, **extra)


MODELS = Registry("model")
OPTIMIZERS = Registry("optimizer")
DATASETS = Registry("dataset")
