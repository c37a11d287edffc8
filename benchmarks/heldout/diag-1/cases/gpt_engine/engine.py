"""A very small event-driven training engine (in the spirit of ignite)."""
import enum
from collections import defaultdict


class Events(enum.Enum):
    STARTED = "started"
    ITERATION_STARTED = "iteration_started"
    ITERATION_COMPLETED = "iteration_completed"
    COMPLETED = "completed"


class State:
    def __init__(self):
        self.iteration = 0
        self.output = None
        self.max_iters = 0


class Engine:
    def __init__(self, process_fn):
        self.process_fn = process_fn
        self.state = State()
        self._handlers = defaultdict(list)

    def on(self, event, every=1):
        def register(fn):
            self._handlers[event].append((fn, every))
            return fn
        return register

    def add_event_handler(self, event, fn, every=1):
        self._handlers[event].append((fn, every))

    def _emit(self, event):
        for fn, every in self._handlers[event]:
            if event in (Events.ITERATION_STARTED, Events.ITERATION_COMPLETED):
                if self.state.iteration % every:
                    continue
            fn(self)

    def run(self, data, max_iters):
        self.state.max_iters = max_iters
        self._emit(Events.STARTED)
        it = iter(data)
        while self.state.iteration < max_iters:
            batch = next(it)
            self.state.iteration += 1
            self._emit(Events.ITERATION_STARTED)
            self.state.output = self.process_fn(self, batch)
            self._emit(Events.ITERATION_COMPLETED)
        self._emit(Events.COMPLETED)
        return self.state
