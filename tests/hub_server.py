"""A small HTTP server that answers the Hugging Face hub requests download_data.py makes
(a dataset's commit, its file list, file downloads), so the real huggingface_hub client
code runs end to end in tests, offline: HF_ENDPOINT points at it, as at a mirror.

    with HubServer() as hub:
        hub.publish("roneneldan/TinyStories", {"data/train-00000.parquet": b"..."})
        env = {"HF_ENDPOINT": hub.url}
        ... hub.downloads counts the file bodies served ...
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


class HubServer:
    def __init__(self):
        self.repos: dict[str, dict] = {}      # repo -> {"main": sha, sha: {path: bytes}}
        self.downloads: list[str] = []        # paths whose bodies were served
        self.withheld: set[str] = set()       # paths answered with 404, as if the hub failed
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def publish(self, repo: str, files: dict[str, bytes]) -> str:
        """A new commit of `repo` holding `files`, which "main" then points to."""
        sha = hashlib.sha1(repr(sorted((p, hashlib.sha1(b).hexdigest())
                                       for p, b in files.items())).encode()).hexdigest()
        refs = self.repos.setdefault(repo, {})
        refs[sha] = dict(files)
        refs["main"] = sha
        return sha

    def __enter__(self) -> "HubServer":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _commit(self, repo: str, rev: str) -> tuple[str, dict] | None:
        refs = self.repos.get(repo)
        if refs is None:
            return None
        sha = refs.get("main") if rev == "main" else rev
        return (sha, refs[sha]) if sha in refs else None

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: bytes = b"", headers: dict | None = None,
                      head: bool = False) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _json(self, obj) -> None:
                self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

            def _route(self, head: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append(f"{self.command} {path}")
                m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/revision/([^/]+)", path)
                if m and (c := hub._commit(m[1], m[2])):
                    sha, files = c
                    return self._json({"id": m[1], "sha": sha,
                                       "siblings": [{"rfilename": p} for p in sorted(files)]})
                m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
                if m and (c := hub._commit(m[1], m[2])):
                    prefix = (m[3] or "/").lstrip("/")
                    return self._json([
                        {"type": "file", "path": p, "size": len(b),
                         "oid": hashlib.sha1(b).hexdigest()}
                        for p, b in sorted(c[1].items()) if p.startswith(prefix)])
                m = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if (m and (c := hub._commit(m[1], m[2])) and m[3] in c[1]
                        and m[3] not in hub.withheld):
                    body = c[1][m[3]]
                    if not head:
                        hub.downloads.append(m[3])
                    return self._send(200, body, {
                        "X-Repo-Commit": c[0], "ETag": f'"{hashlib.sha1(body).hexdigest()}"',
                        "Content-Type": "application/octet-stream"}, head=head)
                self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head)

            def do_GET(self) -> None:
                self._route(head=False)

            def do_HEAD(self) -> None:
                self._route(head=True)

        return Handler
