"""Keep an os-ken app's event thread alive when one of its handlers raises (native hub).

os-ken 4.x runs its "native" hub by default (``OSKEN_HUB_TYPE`` unset): one OS thread per
connection and per app.  In that mode ``os_ken.lib.hub`` defines ``TaskExit = Exception``
(under eventlet it is ``greenlet.GreenletExit``, raised only to kill a green thread).  Two
places rely on it:

- ``OSKenApp._event_loop`` (``os_ken/base/app_manager.py``) re-raises ``hub.TaskExit``
  from a handler as a "normal exit" and logs every other exception;
- ``HubThread.run`` (``os_ken/lib/hub.py``) swallows ``TaskExit`` without a word.

So with the native hub *any* exception in *any* handler ends the app's only event thread,
silently: the process stays alive, every connection keeps answering echo requests (that
happens in the connection's own receive thread), but the app handles no event again.
`use_own_task_exit` gives ``TaskExit`` its own class, which nothing in native mode
raises: a failing handler is then logged with its traceback by ``_event_loop`` and the next
event is handled, and a thread that does die is logged by ``HubThread.run``.
"""

from __future__ import annotations

from types import ModuleType


class NativeTaskExit(Exception):
    """Stands for ``os_ken.lib.hub.TaskExit`` in native mode; never raised (``hub.kill``
    is a no-op there, so no thread is ever asked to exit this way)."""


def use_own_task_exit(hub: ModuleType) -> bool:
    """Give the native hub a ``TaskExit`` that handler errors are not (call before apps run).

    hub: the ``os_ken.lib.hub`` module.  Returns True if it was patched (native hub), False
    under eventlet, where ``TaskExit`` is ``GreenletExit`` and is left alone.
    """
    if getattr(hub, "HUB_TYPE", None) != "native":
        return False
    hub.TaskExit = NativeTaskExit  # type: ignore[attr-defined]
    return True
