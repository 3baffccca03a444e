"""A small in-memory S3 stand-in: the storage under the durable tansu broker of :mod:`.kafka_durable`.

Run as ``python -m tether.adapters.testing.s3_server --port P`` (its own process, so a test's event loop and the
broker's storage never wait on each other). It serves what tansu's object-store client asks of S3, path-style,
without checking signatures: ``PUT`` bucket, ``PUT``/``GET``/``HEAD``/``DELETE`` object (with ``Range``), bulk
delete (``POST ?delete``) and ``ListObjectsV2`` (prefix, delimiter, start-after, continuation token), with the
conditional requests tansu's optimistic concurrency rests on: a ``PUT`` with ``If-None-Match: *`` creates only,
one with ``If-Match: <etag>`` replaces only that version (else ``412 PreconditionFailed``); a ``GET`` honours
``If-Match`` and ``If-None-Match`` (``304``). Anything else is answered ``501 NotImplemented`` and logged, so a
tansu that starts asking for more shows up in the server's log rather than as a silent misbehaviour.

Why not ``moto``'s server (PyPI), which does all this too: tansu's fetch *lists every batch object of the
partition* and must finish the listing within the fetch's max wait (500 ms for tether), or it answers with no
record; moto lists 300 keys in ~0.4 s and 2,000 in ~3.7 s (measured here), so the consumers of a run of a few
hundred events stall. Here keys are kept sorted (``bisect``), and a listing of thousands of keys takes
milliseconds. The objects live in this process's memory: killing the *broker* is the point, never this server.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import quote
from xml.sax.saxutils import escape

from aiohttp import web

_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
_PAGE = 1000


@dataclass(frozen=True)
class _Object:
    body: bytes
    etag: str  # quoted, as S3 sends it
    modified: float


class Store:
    """Buckets of objects, keys kept sorted for listings."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, _Object]] = {}
        self.sorted_keys: dict[str, list[str]] = {}

    def create_bucket(self, bucket: str) -> None:
        self.buckets.setdefault(bucket, {})
        self.sorted_keys.setdefault(bucket, [])

    def put(self, bucket: str, key: str, body: bytes) -> _Object:
        objects = self.buckets[bucket]
        if key not in objects:
            bisect.insort(self.sorted_keys[bucket], key)
        stored = _Object(body=body, etag=f'"{hashlib.md5(body).hexdigest()}"', modified=time.time())
        objects[key] = stored
        return stored

    def delete(self, bucket: str, key: str) -> None:
        if self.buckets[bucket].pop(key, None) is not None:
            keys = self.sorted_keys[bucket]
            del keys[bisect.bisect_left(keys, key)]

    def keys_from(self, bucket: str, prefix: str, after: str) -> list[str]:
        """The keys starting with ``prefix`` that sort after ``after``, in order."""
        keys = self.sorted_keys[bucket]
        start = max(bisect.bisect_left(keys, prefix), bisect.bisect_right(keys, after) if after else 0)
        out = []
        for key in keys[start:]:
            if not key.startswith(prefix):
                break
            out.append(key)
        return out


def _error(status: int, code: str, message: str = "") -> web.Response:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{escape(message or code)}</Message></Error>")
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def _headers(obj: _Object) -> dict[str, str]:
    return {"ETag": obj.etag, "Last-Modified": formatdate(obj.modified, usegmt=True), "Accept-Ranges": "bytes"}


class S3App:
    def __init__(self) -> None:
        self.store = Store()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{bucket}", self.bucket)
        app.router.add_route("*", "/{bucket}/", self.bucket)
        app.router.add_route("*", "/{bucket}/{key:.+}", self.object)
        return app

    async def bucket(self, request: web.Request) -> web.StreamResponse:
        bucket = request.match_info["bucket"]
        if request.method == "PUT":
            self.store.create_bucket(bucket)
            return web.Response(status=200, headers={"Location": f"/{bucket}"})
        if bucket not in self.store.buckets:
            return _error(404, "NoSuchBucket", bucket)
        if request.method == "HEAD":
            return web.Response(status=200)
        if request.method == "GET" and request.query.get("list-type") == "2":
            return self.list_v2(bucket, request)
        if request.method == "POST" and "delete" in request.query:
            return await self.delete_many(bucket, request)
        return self.unsupported(request)

    def unsupported(self, request: web.Request) -> web.Response:
        print(f"s3 stand-in: unsupported {request.method} {request.path_qs}", file=sys.stderr, flush=True)
        return _error(501, "NotImplemented", f"{request.method} {request.path_qs}")

    def list_v2(self, bucket: str, request: web.Request) -> web.Response:
        q = request.query
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        limit = min(int(q.get("max-keys", _PAGE)), _PAGE)
        after = max(q.get("continuation-token", ""), q.get("start-after", ""))
        url_encoded = q.get("encoding-type") == "url"

        def name(key: str) -> str:
            return escape(quote(key, safe="/") if url_encoded else key)

        contents: list[str] = []
        prefixes: list[str] = []
        last = ""
        truncated = False
        for key in self.store.keys_from(bucket, prefix, after):
            if len(contents) + len(prefixes) >= limit:
                truncated = True
                break
            if delimiter and (cut := key.find(delimiter, len(prefix))) >= 0:
                common = key[: cut + len(delimiter)]
                if not prefixes or prefixes[-1] != common:
                    prefixes.append(common)
                last = key
                continue
            obj = self.store.buckets[bucket][key]
            contents.append(f"<Contents><Key>{name(key)}</Key><LastModified>{_iso(obj.modified)}</LastModified>"
                            f"<ETag>{escape(obj.etag)}</ETag><Size>{len(obj.body)}</Size>"
                            f"<StorageClass>STANDARD</StorageClass></Contents>")
            last = key
        if truncated and prefixes and last.startswith(prefixes[-1]):
            last = prefixes[-1] + "\U0010ffff"  # the next page starts after every key under the last prefix
        parts = [f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{_XMLNS}">',
                 f"<Name>{escape(bucket)}</Name><Prefix>{name(prefix)}</Prefix>",
                 f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>{limit}</MaxKeys>",
                 f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if delimiter:
            parts.append(f"<Delimiter>{escape(delimiter)}</Delimiter>")
        if url_encoded:
            parts.append("<EncodingType>url</EncodingType>")
        parts += contents
        parts += [f"<CommonPrefixes><Prefix>{name(p)}</Prefix></CommonPrefixes>" for p in prefixes]
        if truncated:
            parts.append(f"<NextContinuationToken>{escape(last)}</NextContinuationToken>")
        parts.append("</ListBucketResult>")
        return web.Response(status=200, body="".join(parts).encode(), content_type="application/xml")

    async def delete_many(self, bucket: str, request: web.Request) -> web.Response:
        body = (await request.read()).decode()
        keys = [k for k in re.findall(r"<Key>(.*?)</Key>", body, flags=re.S)]
        for key in keys:
            self.store.delete(bucket, key.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
        deleted = "".join(f"<Deleted><Key>{k}</Key></Deleted>" for k in keys)
        xml = f'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult xmlns="{_XMLNS}">{deleted}</DeleteResult>'
        return web.Response(status=200, body=xml.encode(), content_type="application/xml")

    async def object(self, request: web.Request) -> web.StreamResponse:
        bucket, key = request.match_info["bucket"], request.match_info["key"]
        objects = self.store.buckets.get(bucket)
        if objects is None:
            return _error(404, "NoSuchBucket", bucket)
        if set(request.query) & {"uploads", "uploadId", "partNumber", "tagging", "acl"}:
            return self.unsupported(request)
        current = objects.get(key)
        if_match, if_none_match = request.headers.get("If-Match"), request.headers.get("If-None-Match")
        if request.method == "PUT":
            if "x-amz-copy-source" in request.headers:
                return self.unsupported(request)
            body = await request.read()
            if if_none_match == "*" and current is not None:
                return _error(412, "PreconditionFailed", f"{key} exists")
            if if_match is not None and (current is None or if_match != current.etag):
                status = 404 if current is None else 412
                return _error(status, "NoSuchKey" if current is None else "PreconditionFailed", key)
            stored = self.store.put(bucket, key, body)
            return web.Response(status=200, headers={"ETag": stored.etag})
        if request.method == "DELETE":
            self.store.delete(bucket, key)
            return web.Response(status=204)
        if request.method not in ("GET", "HEAD"):
            return self.unsupported(request)
        if current is None:
            return _error(404, "NoSuchKey", key) if request.method == "GET" else web.Response(status=404)
        if if_match is not None and if_match not in ("*", current.etag):
            return _error(412, "PreconditionFailed", key)
        if if_none_match is not None and if_none_match in ("*", current.etag):
            return web.Response(status=304, headers=_headers(current))
        headers = _headers(current)
        body = current.body
        status = 200
        ranged = re.fullmatch(r"bytes=(\d*)-(\d*)", request.headers.get("Range", ""))
        if ranged and body:
            first_s, last_s = ranged.groups()
            if first_s:
                first, last = int(first_s), min(int(last_s) if last_s else len(body) - 1, len(body) - 1)
            else:
                first, last = max(len(body) - int(last_s or 0), 0), len(body) - 1
            if first >= len(body) or first > last:
                return _error(416, "InvalidRange", request.headers["Range"])
            headers["Content-Range"] = f"bytes {first}-{last}/{len(body)}"
            body, status = body[first: last + 1], 206
        return web.Response(status=status, body=body, headers=headers, content_type="application/octet-stream")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket at start")
    args = parser.parse_args()
    server = S3App()
    for bucket in args.bucket:
        server.store.create_bucket(bucket)
    web.run_app(server.app(), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
