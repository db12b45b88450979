"""A loopback stand-in for the Hugging Face hub, speaking the endpoints huggingface_hub 2.4.0
uses, so hub code can be tested without a network.

Two HTTP servers on 127.0.0.1 (random ports), like the hub and its CDN:

hub  GET  /api/models/{repo}                       model info at the default branch
     GET  /api/models/{repo}/revision/{rev}        model info; ``?blobs=true`` adds size, blobId, lfs
     GET  /api/models/{repo}/tree/{rev}[/{path}]   file listing (one page, ``?recursive=``)
     HEAD/GET /{repo}/resolve/{rev}/{file}         git files: 200/206 with ETag (git blob sha1);
                                                   LFS files: 302 to the CDN with X-Linked-Etag /
                                                   X-Linked-Size; X-Repo-Commit on both
cdn  HEAD/GET /{repo}/{sha256}                     LFS blobs, Range-capable, no auth (a signed URL)
hub  GET  /api/agent-harnesses                     the registry huggingface_hub fetches once a
                                                   process for its user agent (kind "telemetry")

Every response carries Content-Length; Range ``bytes=a-b``, ``bytes=a-`` and ``bytes=-n`` give
206 + Content-Range (416 when unsatisfiable). Errors carry X-Error-Code the way
``hf_raise_for_status`` expects (RepoNotFound, RevisionNotFound, EntryNotFound).

A revision is a branch/tag name in ``refs`` or a commit sha in ``commits``. With ``token`` set
the repo is private: hub requests need ``Authorization: Bearer <token>``.

Observability for tests: ``bytes_sent`` (body bytes written by both servers), ``sent_by_kind``
(api / resolve / cdn / telemetry), ``repo_bytes_sent`` (all but telemetry), ``requests`` (one dict per request: server, method, path, range, status,
sent, auth). Faults: ``drop_after(file, n, times=1)`` cuts the next GET that would send more than
n body bytes of ``file`` after n bytes (connection shut down mid-body); ``fail_next(file,
status, times=1)`` answers the next GETs of ``file`` with that status; ``honour_range = False``
makes the servers ignore Range headers.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".h5", ".msgpack")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    sha = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()


class _File:
    def __init__(self, path: str, data: bytes, lfs: bool):
        self.path = path
        self.data = data
        self.lfs = lfs
        self.sha256 = hashlib.sha256(data).hexdigest()
        pointer = lfs_pointer(data)
        self.pointer_size = len(pointer)
        # git stores an LFS file as its pointer: the blob id is the pointer's
        self.blob_id = git_blob_sha1(pointer if lfs else data)

    def sibling(self, blobs: bool) -> dict:
        d = {"rfilename": self.path}
        if blobs:
            d.update(size=len(self.data), blobId=self.blob_id)
            if self.lfs:
                d["lfs"] = {"sha256": self.sha256, "size": len(self.data), "pointerSize": self.pointer_size}
        return d

    def tree_entry(self) -> dict:
        d = {"type": "file", "oid": self.blob_id, "size": len(self.data), "path": self.path}
        if self.lfs:
            d["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": self.pointer_size}
        return d


def _load_tree(src) -> dict[str, bytes]:
    if isinstance(src, dict):
        return {str(k): bytes(v) for k, v in src.items()}
    root = Path(src)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class FakeHub:
    def __init__(
        self,
        repo_id: str,
        commits: dict,
        refs: dict[str, str] | None = None,
        *,
        token: str | None = None,
        lfs_suffixes=LFS_SUFFIXES,
        repo_type: str = "model",
    ):
        """``commits``: {40-hex sha: directory or {path: bytes}}; ``refs``: {branch/tag: sha}
        (default: main -> the first commit)."""
        self.repo_id = repo_id
        self.repo_type = repo_type  # "dataset": /api/datasets/... and /datasets/{repo}/resolve/...
        self.token = token
        self.commits: dict[str, dict[str, _File]] = {}
        for sha, src in commits.items():
            assert re.fullmatch(r"[0-9a-f]{40}", sha), sha
            self.commits[sha] = {p: _File(p, d, p.endswith(tuple(lfs_suffixes))) for p, d in _load_tree(src).items()}
        self.refs = dict(refs) if refs is not None else {"main": next(iter(self.commits))}
        self.blobs: dict[str, _File] = {f.sha256: f for files in self.commits.values() for f in files.values() if f.lfs}
        self.lock = threading.Lock()
        self.honour_range = True  # False: answer every GET with the whole file (200), as some proxies do
        self._faults: list[dict] = []
        self.reset()
        self._hub = self._serve("hub")
        self._cdn = self._serve("cdn")

    # ------------------------------------------------------------------ control

    def reset(self) -> None:
        with self.lock:
            self.bytes_sent = 0
            self.sent_by_kind = {"api": 0, "resolve": 0, "cdn": 0, "telemetry": 0}
            self.requests: list[dict] = []

    def drop_after(self, filename: str, nbytes: int, times: int = 1) -> None:
        with self.lock:
            self._faults.append({"kind": "drop", "file": filename, "n": nbytes, "times": times})

    def fail_next(self, filename: str, status: int = 503, times: int = 1) -> None:
        with self.lock:
            self._faults.append({"kind": "status", "file": filename, "status": status, "times": times})

    @property
    def repo_bytes_sent(self) -> int:
        """Body bytes sent for the repo (API, resolve, CDN), leaving out huggingface_hub's
        once-a-process telemetry call (/api/agent-harnesses)."""
        with self.lock:
            return self.bytes_sent - self.sent_by_kind["telemetry"]

    def faults_left(self) -> int:
        with self.lock:
            return sum(f["times"] for f in self._faults)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def resolve(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.refs.get(revision)

    def close(self) -> None:
        for srv in (self._hub, self._cdn):
            srv.shutdown()
            srv.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ internals

    def _serve(self, name: str) -> ThreadingHTTPServer:
        hub = self

        class Handler(_Handler):
            fake = hub
            server_name_ = name

        srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        srv.block_on_close = False
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fakehub-{name}", daemon=True).start()
        return srv

    def _take_fault(self, kind: str, filename: str, body_len: int):
        with self.lock:
            for f in self._faults:
                if f["kind"] == kind and f["file"] == filename and f["times"] > 0:
                    if kind == "drop" and body_len <= f["n"]:
                        continue
                    f["times"] -= 1
                    return f
        return None


def _parse_range(value: str | None, size: int):
    """None (no/ignorable Range), (start, end_inclusive), or 'unsatisfiable'."""
    if not value:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", value)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None  # malformed or multi-range: serve the whole file, as servers may
    a, b = m.group(1), m.group(2)
    if a == "":
        n = int(b)
        if n == 0:
            return "unsatisfiable"
        return max(0, size - n), size - 1
    start = int(a)
    end = size - 1 if b == "" else min(int(b), size - 1)
    if start >= size or start > end:
        return "unsatisfiable"
    return start, end


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeHub
    server_name_: str

    def log_message(self, *args):  # keep test output clean
        pass

    def do_HEAD(self):
        self._handle(head=True)

    def do_GET(self):
        self._handle(head=False)

    # ------------------------------------------------------------------ plumbing

    def _record(self, status: int, sent: int, kind: str) -> None:
        fake = self.fake
        with fake.lock:
            fake.bytes_sent += sent
            fake.sent_by_kind[kind] += sent
            fake.requests.append(
                {
                    "server": self.server_name_,
                    "method": self.command,
                    "path": self.path,
                    "range": self.headers.get("Range"),
                    "status": status,
                    "sent": sent,
                    "auth": self.headers.get("Authorization"),
                }
            )

    def _reply(self, status: int, body: bytes = b"", headers: dict | None = None, *, head=False, kind="api",
               drop_at: int | None = None) -> None:
        sent = 0 if head else (len(body) if drop_at is None else drop_at)
        # record before answering: once a client has the response, its request is in the log
        self._record(status, sent, kind)
        self.send_response(status)
        hdrs = {"Content-Length": str(len(body))}
        hdrs.update(headers or {})
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if sent:
            self.wfile.write(body[:sent])
            self.wfile.flush()
        if drop_at is not None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _error(self, status: int, code: str | None, message: str, *, head: bool, kind: str, extra=None) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        headers.update(extra or {})
        self._reply(status, body, headers, head=head, kind=kind)

    def _send_file(self, f: _File, headers: dict, *, head: bool, kind: str) -> None:
        fake = self.fake
        if not head:
            fault = fake._take_fault("status", f.path, 0)
            if fault is not None:
                self._error(fault["status"], None, "injected failure", head=head, kind=kind)
                return
        size = len(f.data)
        rng = _parse_range(self.headers.get("Range"), size) if fake.honour_range else None
        headers = {**headers, "Accept-Ranges": "bytes"}
        if rng == "unsatisfiable":
            self._reply(416, b"", {**headers, "Content-Range": f"bytes */{size}"}, head=head, kind=kind)
            return
        if rng is None:
            status, body = 200, f.data
        else:
            status, body = 206, f.data[rng[0] : rng[1] + 1]
            headers["Content-Range"] = f"bytes {rng[0]}-{rng[1]}/{size}"
        drop_at = None
        if not head:
            fault = fake._take_fault("drop", f.path, len(body))
            if fault is not None:
                drop_at = fault["n"]
        self._reply(status, body, headers, head=head, kind=kind, drop_at=drop_at)

    # ------------------------------------------------------------------ routes

    def _handle(self, head: bool) -> None:
        url = urlsplit(self.path)
        segs = [unquote(s) for s in url.path.split("/")[1:]]
        query = parse_qs(url.query)
        fake = self.fake
        if self.server_name_ == "cdn":
            # /{org}/{name}/{sha256}; a signed URL: no auth needed (and none should be sent)
            f = fake.blobs.get(segs[2]) if len(segs) == 3 and "/".join(segs[:2]) == fake.repo_id else None
            if f is None:
                self._error(404, None, "no such blob", head=head, kind="cdn")
                return
            self._send_file(f, {"ETag": f'"{f.sha256}"'}, head=head, kind="cdn")
            return

        if segs == ["api", "agent-harnesses"]:
            # huggingface_hub >= 2.x fetches this registry once a process (user-agent detection)
            body = json.dumps({"standardEnvVars": [], "harnesses": {}}).encode()
            self._reply(200, body, {"Content-Type": "application/json"}, head=head, kind="telemetry")
            return
        api = segs[:2] == ["api", "datasets" if fake.repo_type == "dataset" else "models"]
        if not api and fake.repo_type == "dataset":
            segs = segs[1:] if segs[:1] == ["datasets"] else []
        kind = "api" if api else "resolve"
        rest = segs[2:] if api else segs
        if "/".join(rest[:2]) != fake.repo_id:
            self._error(404, "RepoNotFound", "Repository not found", head=head, kind=kind)
            return
        if fake.token is not None:
            auth = self.headers.get("Authorization")
            if auth is None:
                self._error(401, "RepoNotFound", "Invalid username or password.", head=head, kind=kind)
                return
            if auth != f"Bearer {fake.token}":
                self._error(401, None, "Invalid credentials in Authorization header", head=head, kind=kind)
                return
        rest = rest[2:]
        if api:
            self._api(rest, query, head)
        elif len(rest) >= 3 and rest[0] == "resolve":
            self._resolve(rest[1], "/".join(rest[2:]), head)
        else:
            self._error(404, None, "Not found", head=head, kind=kind)

    def _api(self, rest: list[str], query: dict, head: bool) -> None:
        fake = self.fake
        if not rest:
            rev, sub = "main", None
        elif rest[0] == "revision" and len(rest) == 2:
            rev, sub = rest[1], None
        elif rest[0] == "tree" and len(rest) >= 2:
            rev, sub = rest[1], "/".join(rest[2:])
        else:
            self._error(404, None, "Not found", head=head, kind="api")
            return
        sha = fake.resolve(rev)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head, kind="api")
            return
        files = fake.commits[sha]
        if sub is None:
            blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
            body = {
                "_id": hashlib.md5(fake.repo_id.encode()).hexdigest()[:24],
                "id": fake.repo_id,
                "modelId": fake.repo_id,
                "sha": sha,
                "private": fake.token is not None,
                "gated": False,
                "disabled": False,
                "lastModified": "2024-01-01T00:00:00.000Z",
                "tags": ["safetensors"],
                "siblings": [f.sibling(blobs) for f in files.values()],
            }
        else:
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            prefix = sub + "/" if sub else ""
            entries, folders = [], set()
            for p, f in files.items():
                if not p.startswith(prefix):
                    continue
                tail = p[len(prefix):]
                if "/" in tail and not recursive:
                    folders.add(prefix + tail.split("/")[0])
                    continue
                if recursive:
                    parts = tail.split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        folders.add(prefix + "/".join(parts[:i]))
                entries.append(f.tree_entry())
            body = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in sorted(folders)] + entries
        data = json.dumps(body).encode()
        self._reply(200, data, {"Content-Type": "application/json"}, head=head, kind="api")

    def _resolve(self, rev: str, path: str, head: bool) -> None:
        fake = self.fake
        sha = fake.resolve(rev)
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head, kind="resolve")
            return
        f = fake.commits[sha].get(path)
        if f is None:
            self._error(404, "EntryNotFound", f"{path} does not exist on {rev}", head=head, kind="resolve",
                        extra={"X-Repo-Commit": sha})
            return
        base = {"X-Repo-Commit": sha}
        if f.lfs:
            if not head:
                fault = fake._take_fault("status", f.path, 0)
                if fault is not None:
                    self._error(fault["status"], None, "injected failure", head=head, kind="resolve")
                    return
            headers = {
                **base,
                "ETag": f'"{f.sha256}"',
                "X-Linked-Etag": f'"{f.sha256}"',
                "X-Linked-Size": str(len(f.data)),
                "Location": f"{fake.cdn_endpoint}/{fake.repo_id}/{f.sha256}",
            }
            self._reply(302, b"", headers, head=head, kind="resolve")
            return
        self._send_file(f, {**base, "ETag": f'"{f.blob_id}"'}, head=head, kind="resolve")


def isolate_hub_client(home: Path, monkeypatch, retry_base_s: float) -> None:
    """A clean huggingface_hub environment for a test: private HF_HOME (cache, no saved token of
    this machine), online, no token, the loopback servers reachable past any proxy, and
    headgeom's hub retries ``retry_base_s`` apart. The caller closes huggingface_hub's session
    before and after (``close_session``) so clients pick the environment up."""
    from huggingface_hub import constants

    import headgeom.io.hub_ranges as hub_ranges

    monkeypatch.setenv("HF_HOME", str(home))
    for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(hub_ranges, "RETRY_BASE_S", retry_base_s)


class MultiHub:
    """Several repos behind one hub endpoint: ``repos`` maps a repo_id to (commits, refs) as
    FakeHub takes them. Each repo is its own FakeHub (its CDN serves its blobs; its ``requests``
    log records its traffic); the front server routes the API and resolve requests by repo_id."""

    def __init__(self, repos: dict[str, tuple[dict, dict | None]]):
        self.repos = {rid: FakeHub(rid, commits, refs) for rid, (commits, refs) in repos.items()}
        multi = self

        class Handler(_Handler):
            server_name_ = "hub"

            def _handle(self, head: bool) -> None:
                segs = [unquote(s) for s in urlsplit(self.path).path.split("/")[1:]]
                rest = segs[2:] if segs[:2] == ["api", "models"] else segs
                # an unknown repo: the first repo's handler answers RepoNotFound
                self.fake = multi.repos.get("/".join(rest[:2]), next(iter(multi.repos.values())))
                super()._handle(head)

        self._hub = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._hub.daemon_threads = True
        self._hub.block_on_close = False
        threading.Thread(target=self._hub.serve_forever, kwargs={"poll_interval": 0.05}, name="multihub",
                         daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def bytes_sent(self) -> int:
        return sum(r.repo_bytes_sent for r in self.repos.values())

    def close(self) -> None:
        self._hub.shutdown()
        self._hub.server_close()
        for r in self.repos.values():
            r.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
