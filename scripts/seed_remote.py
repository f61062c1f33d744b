#!/usr/bin/env python3
"""Put a local directory tree into one of the local object-store test servers.

Usage:
    seed_remote.py BACKEND LOCAL_DIR PREFIX    upload every file under LOCAL_DIR to PREFIX/<rel>
    seed_remote.py --env BACKEND               print the export line a client (zarrfs) needs
    seed_remote.py --url BACKEND [PREFIX]      print the URL to mount (s3://zarrfs/PREFIX, ...)
    seed_remote.py --wait BACKEND [SECONDS]    wait until the server answers (exit 1 if not)
    seed_remote.py --make-bucket BACKEND       create the bucket/container `zarrfs` (idempotent)

BACKEND is s3 (moto), azure (Azurite), gcs (fake-gcs-server) or http (nginx); the servers are
started by scripts/servers.sh on 127.0.0.1. Uploads go through each server's own API (boto3,
azure-storage-blob, the fake-gcs JSON upload API); for http the files are copied into the
nginx root. Also importable: the tests use the same functions to seed, list and fetch objects.

Environment: ZARRFS_{S3,AZURE,GCS,HTTP,HTTP_STATIC,HTTP_PLAIN,HTTP_BARE,HTTPS}_PORT override the ports
(9000, 10000, 4443, 8080, 8081, 8082, 8083, 8084);
ZARRFS_SERVERS_DIR the servers' data directory (default $REPO/.cache/servers).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("s3", "azure", "gcs", "http")
BUCKET = "zarrfs"
HOST = "127.0.0.1"
DEFAULT_PORTS = {"s3": 9000, "azure": 10000, "gcs": 4443, "http": 8080}

AWS_KEY_ID = "testing"
AWS_SECRET = "testing"
AWS_REGION = "us-east-1"
# Azurite's well-known development account (public, documented by Microsoft).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
             "K1SZFPTOtr/KBHBeksoGMGw==")


def port(backend: str) -> int:
    return int(os.environ.get(f"ZARRFS_{backend.upper()}_PORT", DEFAULT_PORTS[backend]))


def endpoint(backend: str) -> str:
    return f"http://{HOST}:{port(backend)}"


def servers_dir() -> Path:
    return Path(os.environ.get("ZARRFS_SERVERS_DIR", REPO / ".cache" / "servers"))


def http_root() -> Path:
    """The directory nginx serves at / (the bucket is its subdirectory `zarrfs`)."""
    return servers_dir() / "http" / "www"


def join_key(prefix: str, rel: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{rel}" if prefix else rel


def url(backend: str, prefix: str = "") -> str:
    """The URL zarrfs mounts for PREFIX in the test bucket."""
    prefix = prefix.strip("/")
    if backend == "http":
        return f"{endpoint('http')}/{join_key(BUCKET, prefix)}"
    scheme = {"s3": "s3", "azure": "az", "gcs": "gs"}[backend]
    return f"{scheme}://{join_key(BUCKET, prefix)}"


def http_static_url(prefix: str = "") -> str:
    """The same tree as url("http", prefix), from the nginx listener that behaves like a stock
    static web server (directories redirect to a trailing slash and show an HTML index)."""
    static_port = int(os.environ.get("ZARRFS_HTTP_STATIC_PORT", 8081))
    return f"http://{HOST}:{static_port}/{join_key(BUCKET, prefix.strip('/'))}"


def http_plain_url(prefix: str = "", index: bool = True) -> str:
    """The same tree from an nginx listener without WebDAV (PROPFIND is refused): with HTML
    directory index pages (`index`), or with none (a directory is 403)."""
    if index:
        port = int(os.environ.get("ZARRFS_HTTP_PLAIN_PORT", 8082))
    else:
        port = int(os.environ.get("ZARRFS_HTTP_BARE_PORT", 8083))
    return f"http://{HOST}:{port}/{join_key(BUCKET, prefix.strip('/'))}"


def https_url(prefix: str = "") -> str:
    """The same tree from the nginx listener without WebDAV, with index pages, over TLS (its
    certificate is signed by https_ca())."""
    port = int(os.environ.get("ZARRFS_HTTPS_PORT", 8084))
    return f"https://{HOST}:{port}/{join_key(BUCKET, prefix.strip('/'))}"


def https_ca() -> Path:
    """The private certificate authority that signed the HTTPS listener's certificate."""
    return servers_dir() / "http" / "tls" / "ca.pem"


def gcs_service_account() -> Path:
    """A service-account file that points object_store's GCS client at fake-gcs-server without
    OAuth (object_store reads `gcs_base_url` and `disable_oauth` from it)."""
    path = servers_dir() / "gcs" / "service-account.json"
    doc = {"gcs_base_url": endpoint("gcs"), "disable_oauth": True, "client_email": "",
           "private_key": "", "private_key_id": ""}
    text = json.dumps(doc) + "\n"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def client_env(backend: str) -> dict[str, str]:
    """Environment variables a client (zarrfs through object_store 0.14) needs for BACKEND."""
    if backend == "s3":
        return {"AWS_ENDPOINT_URL": endpoint("s3"), "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
                "AWS_REGION": AWS_REGION, "AWS_DEFAULT_REGION": AWS_REGION}
    if backend == "azure":
        return {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURE_STORAGE_ACCOUNT_NAME": AZURE_ACCOUNT,
                "AZURE_STORAGE_ACCOUNT_KEY": AZURE_KEY,
                "AZURITE_BLOB_STORAGE_URL": endpoint("azure"), "AZURE_ALLOW_HTTP": "true"}
    if backend == "gcs":
        return {"GOOGLE_SERVICE_ACCOUNT": str(gcs_service_account()), "GOOGLE_ALLOW_HTTP": "true",
                "STORAGE_EMULATOR_HOST": endpoint("gcs")}
    if backend == "http":
        return {}
    raise ValueError(backend)


def export_line(backend: str) -> str:
    env = client_env(backend)
    if not env:
        return f"# {backend}: no environment needed (mount {url(backend, 'PREFIX')})"
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


# ---------------------------------------------------------------------------------------------
# plain HTTP (urllib: no dependency for probing)


def http_request(method: str, target: str, body: bytes | None = None, headers: dict | None = None,
                 timeout: float = 30) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request; HTTP error statuses are returned, not raised."""
    req = urllib.request.Request(target, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def ping(backend: str) -> int:
    """One request to the server; returns its HTTP status (any status means it answers)."""
    path = {"s3": "/", "azure": f"/{AZURE_ACCOUNT}?comp=list", "gcs": "/storage/v1/b",
            "http": "/"}[backend]
    return http_request("GET", endpoint(backend) + path, timeout=5)[0]


def wait_ready(backend: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            ping(backend)
            return
        except OSError as e:  # connection refused, reset, timeout
            last = e
        if time.monotonic() > deadline:
            raise TimeoutError(f"{backend} server at {endpoint(backend)} did not answer within "
                               f"{timeout:.0f} s: {last}")
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# clients per backend


def s3_client():
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint("s3"), aws_access_key_id=AWS_KEY_ID,
                        aws_secret_access_key=AWS_SECRET, region_name=AWS_REGION,
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"max_attempts": 3}))


def azure_container():
    from azure.storage.blob import BlobServiceClient

    conn = (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"BlobEndpoint={endpoint('azure')}/{AZURE_ACCOUNT};")
    return BlobServiceClient.from_connection_string(conn).get_container_client(BUCKET)


def gcs_object_url(key: str, media: bool = True) -> str:
    q = "?alt=media" if media else ""
    return f"{endpoint('gcs')}/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(key, safe='')}{q}"


def http_url(key: str) -> str:
    return f"{endpoint('http')}/{BUCKET}/{urllib.parse.quote(key)}"


def make_bucket(backend: str) -> None:
    """Create the bucket/container `zarrfs` (nothing if it exists)."""
    if backend == "s3":
        s3 = s3_client()
        try:
            s3.create_bucket(Bucket=BUCKET)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        s3.head_bucket(Bucket=BUCKET)
    elif backend == "azure":
        from azure.core.exceptions import ResourceExistsError

        try:
            azure_container().create_container()
        except ResourceExistsError:
            pass
    elif backend == "gcs":
        body = json.dumps({"name": BUCKET}).encode()
        status, _, text = http_request("POST", f"{endpoint('gcs')}/storage/v1/b?project=zarrfs",
                                       body, {"Content-Type": "application/json"})
        if status not in (200, 409):
            raise RuntimeError(f"gcs: creating bucket {BUCKET}: HTTP {status} {text[:300]!r}")
    elif backend == "http":
        (http_root() / BUCKET).mkdir(parents=True, exist_ok=True)
        status, _, _ = http_request("GET", f"{endpoint('http')}/{BUCKET}/")
        if status >= 500:
            raise RuntimeError(f"http: GET /{BUCKET}/ answered {status}")
    else:
        raise ValueError(backend)


def put_object(backend: str, key: str, data: bytes) -> None:
    if backend == "s3":
        s3_client().put_object(Bucket=BUCKET, Key=key, Body=data)
    elif backend == "azure":
        azure_container().upload_blob(key, data, overwrite=True)
    elif backend == "gcs":
        target = (f"{endpoint('gcs')}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name="
                  + urllib.parse.quote(key, safe=""))
        status, _, text = http_request("POST", target, data,
                                       {"Content-Type": "application/octet-stream"})
        if status != 200:
            raise RuntimeError(f"gcs: uploading {key}: HTTP {status} {text[:300]!r}")
    elif backend == "http":
        dest = http_root() / BUCKET / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".seed-tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
    else:
        raise ValueError(backend)


def get_object(backend: str, key: str, byte_range: str | None = None) -> bytes:
    """The object's bytes, or the HTTP `Range` (e.g. "bytes=10-19", "bytes=-16") of them, read
    back through the server. Raises KeyError if the object does not exist."""
    headers = {"Range": byte_range} if byte_range else {}
    if backend == "s3":
        s3 = s3_client()
        try:
            kw = {"Range": byte_range} if byte_range else {}
            return s3.get_object(Bucket=BUCKET, Key=key, **kw)["Body"].read()
        except s3.exceptions.NoSuchKey:
            raise KeyError(key) from None
    if backend == "azure":
        from azure.core.exceptions import ResourceNotFoundError

        blob = azure_container().get_blob_client(key)
        try:
            if not byte_range:
                return blob.download_blob().readall()
            lo, hi = byte_range.removeprefix("bytes=").split("-")
            if not lo:  # suffix range: Azure needs offsets
                size = blob.get_blob_properties().size
                lo, hi = str(max(0, size - int(hi))), str(size - 1)
            return blob.download_blob(offset=int(lo), length=int(hi) - int(lo) + 1).readall()
        except ResourceNotFoundError:
            raise KeyError(key) from None
    target = gcs_object_url(key) if backend == "gcs" else http_url(key)
    status, _, body = http_request("GET", target, headers=headers)
    if status == 404:
        raise KeyError(key)
    if status not in (200, 206) or (byte_range and status != 206):
        raise RuntimeError(f"{backend}: GET {key} ({byte_range}): HTTP {status}")
    return body


def list_objects(backend: str, prefix: str) -> dict[str, int]:
    """Every object under PREFIX/ as {key relative to PREFIX: size}, listed through the server
    (http: WebDAV PROPFIND with Depth 1, walked recursively)."""
    base = prefix.strip("/") + "/" if prefix.strip("/") else ""
    out: dict[str, int] = {}
    if backend == "s3":
        pages = s3_client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=base)
        for page in pages:
            for obj in page.get("Contents", []):
                out[obj["Key"][len(base):]] = obj["Size"]
    elif backend == "azure":
        for blob in azure_container().list_blobs(name_starts_with=base):
            out[blob.name[len(base):]] = blob.size
    elif backend == "gcs":
        token = None
        while True:
            q = {"prefix": base, "maxResults": "1000"}
            if token:
                q["pageToken"] = token
            target = f"{endpoint('gcs')}/storage/v1/b/{BUCKET}/o?" + urllib.parse.urlencode(q)
            status, _, body = http_request("GET", target)
            if status != 200:
                raise RuntimeError(f"gcs: listing {base}: HTTP {status} {body[:300]!r}")
            doc = json.loads(body)
            for item in doc.get("items", []):
                out[item["name"][len(base):]] = int(item["size"])
            token = doc.get("nextPageToken")
            if not token:
                break
    elif backend == "http":
        _propfind_walk(f"/{BUCKET}/{urllib.parse.quote(base)}", f"/{BUCKET}/{base}", out)
    else:
        raise ValueError(backend)
    return out


def _propfind_walk(href: str, strip: str, out: dict) -> None:
    status, _, body = http_request("PROPFIND", endpoint("http") + href, headers={"Depth": "1"})
    if status == 404:
        return
    if status != 207:
        raise RuntimeError(f"http: PROPFIND {href}: HTTP {status} {body[:300]!r}")
    ns = {"d": "DAV:"}
    for resp in ET.fromstring(body).findall("d:response", ns):
        h = resp.findtext("d:href", namespaces=ns)
        path = urllib.parse.unquote(urllib.parse.urlparse(h).path)
        if path.rstrip("/") == urllib.parse.unquote(href).rstrip("/"):
            continue
        if resp.find(".//d:resourcetype/d:collection", ns) is not None:
            _propfind_walk(urllib.parse.quote(path.rstrip("/") + "/"), strip, out)
        else:
            size = resp.findtext(".//d:getcontentlength", namespaces=ns)
            out[path[len(strip):]] = int(size)


def delete_prefix(backend: str, prefix: str) -> int:
    """Delete every object under PREFIX/; returns how many."""
    base = prefix.strip("/") + "/"
    keys = [base + k for k in list_objects(backend, prefix)]
    if backend == "s3":
        s3 = s3_client()
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})
    elif backend == "azure":
        c = azure_container()
        for k in keys:
            c.delete_blob(k)
    elif backend == "gcs":
        for k in keys:
            http_request("DELETE", gcs_object_url(k, media=False))
    elif backend == "http":
        shutil.rmtree(http_root() / BUCKET / prefix.strip("/"), ignore_errors=True)
    return len(keys)


# ---------------------------------------------------------------------------------------------
# seeding


def local_files(local_dir: Path) -> dict[str, Path]:
    """Relative key ('/'-separated) -> path of every regular file under local_dir."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(local_dir):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                out[p.relative_to(local_dir).as_posix()] = p
    return out


def upload_tree(backend: str, local_dir: Path, prefix: str, workers: int = 8) -> int:
    """Upload every file under local_dir to PREFIX/<relative path>; returns the file count."""
    files = local_files(Path(local_dir))
    if backend == "http":
        workers = 1

    def one(item):
        rel, path = item
        put_object(backend, join_key(prefix, rel), path.read_bytes())

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, sorted(files.items())))
    return len(files)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ops = {"--env", "--url", "--wait", "--make-bucket"}
    if argv and argv[0] in ops:
        op, rest = argv[0], argv[1:]
        if not rest or rest[0] not in BACKENDS:
            print(f"seed_remote.py {op}: BACKEND must be one of {', '.join(BACKENDS)}", file=sys.stderr)
            return 2
        backend = rest[0]
        try:
            if op == "--env":
                print(export_line(backend))
            elif op == "--url":
                print(url(backend, rest[1] if len(rest) > 1 else ""))
            elif op == "--wait":
                wait_ready(backend, float(rest[1]) if len(rest) > 1 else 60)
            else:
                make_bucket(backend)
        except Exception as e:  # noqa: BLE001 - a one-line reason for the shell script
            print(f"seed_remote.py {op} {backend}: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("backend", choices=BACKENDS)
    parser.add_argument("local_dir", type=Path)
    parser.add_argument("prefix")
    args = parser.parse_args(argv)
    if not args.local_dir.is_dir():
        parser.error(f"not a directory: {args.local_dir}")
    t0 = time.monotonic()
    n = upload_tree(args.backend, args.local_dir, args.prefix)
    print(f"seed_remote: {n} files -> {url(args.backend, args.prefix)} "
          f"({time.monotonic() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
