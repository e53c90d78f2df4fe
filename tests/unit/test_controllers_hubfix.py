"""`controllers.hubfix`: with os-ken's native hub, a handler that raises must not end the
app's event thread (unpatched, ``_event_loop`` re-raises it as ``TaskExit`` and
``HubThread.run`` swallows it, so the app silently stops handling events)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from os_ken.base import app_manager
from os_ken.controller import event
from os_ken.lib import hub

from controllers.hubfix import NativeTaskExit, use_own_task_exit


class Numbered(event.EventBase):
    def __init__(self, n: int):
        super().__init__()
        self.n = n


class FailsOnTwo(app_manager.OSKenApp):
    """Records the events it handles; its handler raises on event 2."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seen: list[int] = []
        self.done = threading.Event()
        self.register_handler(Numbered, self.on_event)

    def on_event(self, ev: Numbered) -> None:
        self.seen.append(ev.n)
        if ev.n == 4:
            self.done.set()
        if ev.n == 2:
            raise TypeError("a bug in one handler")


def test_a_failing_handler_does_not_end_the_event_thread(monkeypatch, caplog) -> None:
    if hub.HUB_TYPE != "native":
        pytest.skip(f"os-ken runs its {hub.HUB_TYPE} hub here (OSKEN_HUB_TYPE)")
    monkeypatch.setattr(hub, "TaskExit", hub.TaskExit)  # restored after the test
    assert use_own_task_exit(hub) is True
    app = FailsOnTwo()
    app.start()
    try:
        for n in range(5):
            app._send_event(Numbered(n), None)
        assert app.done.wait(10), f"the event thread stopped after events {app.seen}"
        assert app.seen == [0, 1, 2, 3, 4]
        assert app.threads[0].is_alive()
        assert "a bug in one handler" in caplog.text  # logged with its traceback
        assert hub.TaskExit is NativeTaskExit
    finally:
        app.stop()


def test_eventlet_hub_is_left_alone() -> None:
    class EventletHub:
        HUB_TYPE = "eventlet"
        TaskExit = GeneratorExit

    fake = EventletHub()
    assert use_own_task_exit(fake) is False  # type: ignore[arg-type]
    assert fake.TaskExit is GeneratorExit


@pytest.mark.parametrize("exc", [TypeError, AttributeError, KeyError])
def test_ordinary_errors_are_not_task_exits(exc: type[Exception]) -> None:
    assert not issubclass(exc, NativeTaskExit)
