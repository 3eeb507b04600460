"""One interface for every guest an agent drives: start, step (act + observe), close.

:class:`DesktopBackend` is what an environment holds. Two guests implement it:

* :class:`SandboxDesktop`: the desktop of a sandbox session (host.py, over HTTP), the Linux
  guest that runs here — Xvfb, openbox and the task's applications in the session's jail.
* ``VncDesktop`` (vnc.py): any VNC server — a VM's console, a Windows or macOS guest with a
  VNC server — driven with RFB pointer/key events and framebuffer reads.

Both take the same validated actions (actions.py: OSWorld's dict form, or pyautogui code) and
return the same :class:`DesktopObservation`.
"""

from __future__ import annotations

from typing import Any, Protocol

from dockyard.sandbox.desktop.wire import DesktopObservation, DesktopSpec, DesktopStep


class DesktopBackend(Protocol):
    """A guest's screen, mouse and keyboard."""

    def start(self, spec: DesktopSpec) -> DesktopObservation:
        """Bring the guest's desktop up (or back to a fresh start); the first observation."""
        ...

    def step(self, step: DesktopStep) -> DesktopObservation:
        """Validate and perform ``step``'s actions; an invalid one is refused whole
        (``observation.invalid`` says why) and nothing of it runs."""
        ...

    def close(self) -> None: ...


class DesktopError(RuntimeError):
    """The guest's desktop is not running, or the request was refused (status, detail)."""

    def __init__(self, status: int, detail: Any):
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


def _observation(resp: Any) -> DesktopObservation:
    if resp.status_code != 200:
        try:
            detail = resp.json().get("detail")
        except ValueError:
            detail = resp.text
        raise DesktopError(resp.status_code, detail)
    return DesktopObservation.model_validate(resp.json())


class SandboxDesktop:
    """The desktop of session ``session_id`` of a sandbox service (``client``: SandboxClient)."""

    def __init__(self, client: Any, session_id: str, timeout_s: float = 120.0) -> None:
        self.client, self.session_id, self.timeout_s = client, session_id, timeout_s
        self.path = f"/v1/sessions/{session_id}/desktop"

    def start(self, spec: DesktopSpec) -> DesktopObservation:
        body = spec.model_dump(mode="json")
        return _observation(
            self.client._request("POST", self.path, json=body, timeout=self.timeout_s)
        )

    def step(self, step: DesktopStep) -> DesktopObservation:
        body = step.model_dump(mode="json")
        return _observation(
            self.client._request("POST", f"{self.path}/step", json=body, timeout=self.timeout_s)
        )

    def close(self) -> None:
        self.client._request("DELETE", self.path)


class AsyncSandboxDesktop:
    """:class:`SandboxDesktop` over an ``AsyncSandboxClient`` (coroutines; what environments
    running in an event loop use)."""

    def __init__(self, client: Any, session_id: str, timeout_s: float = 120.0) -> None:
        self.client, self.session_id, self.timeout_s = client, session_id, timeout_s
        self.path = f"/v1/sessions/{session_id}/desktop"

    async def start(self, spec: DesktopSpec) -> DesktopObservation:
        body = spec.model_dump(mode="json")
        return _observation(
            await self.client._request("POST", self.path, json=body, timeout=self.timeout_s)
        )

    async def step(self, step: DesktopStep) -> DesktopObservation:
        body = step.model_dump(mode="json")
        r = await self.client._request(
            "POST", f"{self.path}/step", json=body, timeout=self.timeout_s
        )
        return _observation(r)

    async def close(self) -> None:
        await self.client._request("DELETE", self.path)
