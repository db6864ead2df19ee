"""Headless Chromium for the report's tests: the DOM after loading, a screenshot, and every
network request the page makes (through a local proxy that only counts)."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import threading
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The browser's own services, which it calls whatever page it shows (time, updates, accounts).
BROWSER_HOSTS = ("google.com", "googleapis.com")


def chromium(page: Path, *args: str, proxy_port: int | None = None) -> str:
    """Run Chromium on `page` with a fresh profile; its stdout (the DOM with --dump-dom)."""
    with tempfile.TemporaryDirectory() as profile:
        command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args]
        if proxy_port is not None:
            command += [f"--proxy-server=http://127.0.0.1:{proxy_port}", "--proxy-bypass-list=<-loopback>"]
        done = subprocess.run([*command, page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dump_dom(page: Path) -> str:
    return chromium(page, "--dump-dom")


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 3000) -> None:
    chromium(page, "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={png}")


def page_requests(page: Path) -> list[str]:
    """The hosts the page asked for while loading (the browser's own service calls left out)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(32)
    server.settimeout(0.1)  # the thread checks `done` between waits and ends with the test
    seen: list[bytes] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(2)
            try:
                seen.append(conn.recv(4096))
            except OSError:
                pass
            conn.close()

    # No thread may outlive this function: a stray thread would take signals meant for the main
    # one (tests/test_writes.py holds SIGINT back in the main thread and expects it to wait).
    listener = threading.Thread(target=accept)
    listener.start()
    try:
        chromium(page, "--dump-dom", proxy_port=server.getsockname()[1])
    finally:
        done.set()
        listener.join()
        server.close()
    hosts = []
    for request in seen:
        line = request.split(b"\r\n", 1)[0].decode("latin-1")
        target = line.split(" ")[1] if " " in line else line
        host = target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
        if not host.endswith(BROWSER_HOSTS):
            hosts.append(host)
    return hosts


class Element:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Element | None"):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []
        self.text = ""

    def find_all(self, tag: str, **attrs: str) -> list["Element"]:
        found = []
        for child in self.children:
            if child.tag == tag and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                found.append(child)
            found.extend(child.find_all(tag, **attrs))
        return found

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)


_VOID = {"meta", "link", "br", "img", "input", "hr", "area", "base", "col", "source", "wbr"}  # HTML void elements


class _Tree(HTMLParser):
    def __init__(self):
        super().__init__()
        self.root = self.current = Element("#root", {}, None)

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(element)
        if tag not in _VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.text += data


def parse(html: str) -> Element:
    tree = _Tree()
    tree.feed(html)
    return tree.root
