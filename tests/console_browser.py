"""A headless Chromium the console tests drive over the DevTools protocol (a websocket, through the
`websocket-client` package): open a page, evaluate JavaScript in it, wait for a condition with a
deadline, take screenshots. Page errors (uncaught exceptions, console.error) are collected so a test
can assert there were none. One browser per test module is enough; pages are cheap."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
PROJECT = Path(__file__).resolve().parent.parent
ARTIFACTS = PROJECT / "test-artifacts" / "console"


class BrowserError(Exception):
    """The browser failed to start, a DevTools call failed, or a condition was not met in time."""


class Browser:
    """One headless Chromium with one page (tab). Use as a context manager."""

    def __init__(self, profile_dir: Path, width: int = 1400, height: int = 1000,
                 headers: dict[str, str] | None = None) -> None:
        """`headers`: extra request headers for every load (e.g. an HTTP Basic `Authorization`)."""
        self.profile_dir = Path(profile_dir)
        self.width, self.height = width, height
        self.headers = headers or {}
        self.errors: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None
        self.ws: websocket.WebSocket | None = None
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> "Browser":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, timeout: float = 30.0) -> None:
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        port_file = self.profile_dir / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--hide-scrollbars", "--mute-audio", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile_dir}", f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise BrowserError(f"chromium did not start (exit code {self.process.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)
        if self.headers:
            self.call("Network.enable")
            self.call("Network.setExtraHTTPHeaders", headers=self.headers)

    def close(self) -> None:
        if self.ws is not None:
            try:
                self.call("Browser.close", timeout=5)
            except Exception:
                pass
            self.ws.close()
            self.ws = None
        if self.process is not None:
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    # ------------------------------------------------------------------------ protocol

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events met meanwhile are kept)."""
        assert self.ws is not None
        self._next_id += 1
        ident = self._next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            self.ws.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                message = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                raise BrowserError(f"{method}: no answer in {timeout} s") from None
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        self._events.append(message)

    # ------------------------------------------------------------------------ page

    def goto(self, url: str, timeout: float = 30.0) -> None:
        """Load `url` and wait for its load event."""
        self._events.clear()
        result = self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"loading {url}: {result['errorText']}")
        self.wait_for("document.readyState === 'complete'", timeout)

    def eval(self, expression: str, timeout: float = 30.0) -> Any:
        """The value of a JavaScript expression in the page (promises awaited, JSON-like values)."""
        result = self.call("Runtime.evaluate", timeout=timeout, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails'].get('exception', {}).get('description')}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 20.0, interval: float = 0.05) -> Any:
        """Poll `expression` until it is truthy in JavaScript's sense (a DOM node counts; its value
        is returned, `{}` for objects that do not serialise); BrowserError at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value is not None and value is not False and value != "" and not (type(value) in (int, float)
                                                                                 and value == 0):
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"not true within {timeout} s: {expression}")
            time.sleep(interval)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        """A PNG of the page (the whole scrollable page by default) at `path`."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def keep_artifact(path: Path) -> Path:
    """Copy a screenshot to `test-artifacts/console/` in the project (gitignored) for people to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target = ARTIFACTS / Path(path).name
    shutil.copyfile(path, target)
    return target
