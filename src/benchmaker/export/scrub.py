"""Keeping secrets out of everything the export writes and the upload sends."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = ["scrub_config", "scrub_url", "secret_values", "find_secrets", "REDACTED", "local_paths", "hide_paths",
           "hide_paths_in_folder", "find_local_paths", "parquet_strings"]

REDACTED = "<redacted>"
LOCAL = "<local>"
SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_?key|access_key|secret_key|credentials?|auth)$",
                        re.IGNORECASE)
TOKEN_LIKE = re.compile(
    r"(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|(?i:bearer)\s+[A-Za-z0-9._\-]{8,})")
DEFAULT_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
               "NRP_API_KEY")


def _env_names(obj: Any) -> Iterable[str]:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if str(k).endswith("_env") and isinstance(v, str):
                yield v
            yield from _env_names(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _env_names(v)


def secret_values(config: Any = None, extra_env: Iterable[str] = ()) -> list[str]:
    """Values of the environment variables that hold secrets (named by ``*_env`` keys, or well known)."""
    names = set(DEFAULT_ENV) | set(extra_env) | set(_env_names(config or {}))
    vals = {os.environ.get(n, "") for n in names}
    return sorted(v for v in vals if len(v) >= 8)


def _scrub_str(s: str, secrets: list[str]) -> str:
    for v in secrets:
        if v in s:
            s = s.replace(v, REDACTED)
    return TOKEN_LIKE.sub(REDACTED, s)


# -- endpoint URLs: the provider is published, not its credentials nor the machine (docs/export.md) -----------

URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#\s]*)(?P<path>[^?#\s]*)"
                 r"(?P<query>\?[^#\s]*)?(?P<fragment>#\S*)?")
# schemes whose authority names a network host (s3://bucket, hf://org/repo name no host of this machine)
NETWORK_SCHEMES = {"http", "https", "ws", "wss", "grpc", "grpcs", "tcp", "redis", "rediss", "mongodb", "postgres",
                   "postgresql", "mysql", "amqp", "amqps", "nats", "ftp", "sftp"}
# host names that only resolve inside a machine, a LAN or a cluster (a name without a dot: a search domain's)
LOCAL_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".lan", ".home.arpa", ".svc",
                  ".cluster.local", ".svc.cluster.local")
CGNAT = ipaddress.ip_network("100.64.0.0/10")
HOST_PORT = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]*)(?P<port>:\d*)?")


def _local_host(host: str) -> bool:
    """Whether ``host`` (a URL's host, lower case, IPv6 without brackets) names this machine, a private network or
    a cluster-internal service; decided from the text alone (no DNS), so every machine decides alike."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(LOCAL_SUFFIXES)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_reserved or (
        ip.version == 4 and ip in CGNAT)


def scrub_url(url: str) -> str:
    """A URL (the whole string) as published: its userinfo (``user:password@``), query string and fragment
    (``?key=...``, ``#access_token=...``) replaced by ``<redacted>``, a host of this machine, a private network
    or a cluster (127.0.0.1, localhost, 10.x, 192.168.x, 172.16-31.x, ::1, *.local, *.svc.cluster.local, a
    name without a dot) by ``<local>``, scheme, port and path kept; a public host stays. Any other string is
    returned unchanged."""
    m = URL.fullmatch(url)
    if m is None:
        return url
    _, at, hostport = m["authority"].rpartition("@")
    hp = HOST_PORT.fullmatch(hostport)
    if m["scheme"].lower() in NETWORK_SCHEMES and hp and hp["host"] and _local_host(hp["host"].strip("[]").lower()):
        hostport = LOCAL + (hp["port"] or "")
    return "".join([m["scheme"], "://", f"{REDACTED}@" if at else "", hostport, m["path"],
                    f"?{REDACTED}" if m["query"] else "", f"#{REDACTED}" if m["fragment"] else ""])


def scrub_config(obj: Any, secrets: list[str] | None = None) -> Any:
    """Drop private keys (leading ``_``), redact secret-named keys and token-looking or secret values, publish
    endpoint URLs without credentials nor local hosts (:func:`scrub_url`)."""
    secrets = secrets if secrets is not None else secret_values(obj)
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            k = str(k)
            if k.startswith("_"):
                continue
            if SECRET_KEY.search(k) and not k.endswith("_env") and v not in (None, "", {}, []):
                out[k] = REDACTED
            else:
                out[k] = scrub_config(v, secrets)
        return out
    if isinstance(obj, list):
        return [scrub_config(v, secrets) for v in obj]
    if isinstance(obj, str):
        return _scrub_str(scrub_url(obj), secrets)
    return obj


TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".json", ".jsonl", ".csv", ".html", ".txt", ".tsv"}


def find_secrets(folder: str | Path, secrets: list[str]) -> list[str]:
    """Text files under ``folder`` containing one of ``secrets`` (the secrets themselves are never returned)."""
    if not secrets:
        return []
    found = []
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            data = p.read_bytes()
            if any(s.encode() in data for s in secrets):
                found.append(str(p.relative_to(folder)))
    return found


# -- local paths: nothing published names a folder of the machine that built it (docs/export.md) ----------


def _path_strings(obj: Any) -> Iterable[str]:
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from _path_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _path_strings(v)
    elif isinstance(obj, str):
        s = obj.split(":", 1)[1] if obj.startswith(("local-dir:", "file:")) else obj
        if s.startswith(("/", "~")) and "\n" not in s and len(s) > 1:
            yield s


def _public(f: Path, bases: Iterable[tuple[Path, str]]) -> str:
    """``f`` relative to the first of ``bases`` (folder, its public name) that holds it, else ``<local>/<name>``."""
    for base, public in bases:
        try:
            rel = f.relative_to(base)
        except ValueError:
            continue
        return public if str(rel) == "." else f"{public}/{rel}"
    return f"{LOCAL}/{f.name}"


def _forms(path: str, cwd: Path) -> set[str]:
    """The absolute forms of ``path`` (as given, ``~`` expanded, relative to ``cwd``; and resolved), less ``/``."""
    p = Path(os.path.expanduser(path))
    if not p.is_absolute():
        p = cwd / p
    return {form for form in (os.path.abspath(p), os.path.realpath(p)) if form not in ("/", "")}


def local_paths(config: Any = None, extra: Iterable[str | os.PathLike | None] = ()) -> dict[str, str]:
    """Absolute paths of this machine that may appear in the export, each with its public form.

    The paths named in the (public) config (also ``local-dir:`` model folders), the working folder,
    the home folder and ``extra`` (the image folder, the results folder), each as given and resolved.
    Public forms do not depend on where the build ran: a path the config writes absolutely is
    ``<local>/<its name>`` (and one written ``~/...`` stays so), resolved or not, whatever the working
    and home folders (the text of the config decides it); any other path under the working folder
    becomes relative (``./results/...``: relative config paths resolve there), one under the home
    folder ``~/...``, any other ``<local>/<its name>``. So two builds of the same benchmark from
    different folders, or on different executors, publish the same bytes."""
    cwd = Path.cwd().resolve()
    home = Path.home().resolve()
    homes = ((home, "~"), (Path(os.path.realpath(home)), "~"))
    out: dict[str, str] = {}
    for r in {str(p) for p in extra if p} | {str(cwd), str(home)}:
        for form in _forms(r, cwd):
            out[form] = _public(Path(form), ((cwd, "."), (Path(os.path.realpath(cwd)), "."), *homes))
    for r in set(_path_strings(config)):  # from the config's text alone: never relative to where the build ran
        p = Path(os.path.abspath(os.path.expanduser(r)))
        out.update(dict.fromkeys(_forms(r, cwd), _public(p, homes) if r.startswith("~") else f"{LOCAL}/{p.name}"))
    return out


def _pattern(paths: Mapping[str, str]) -> re.Pattern | None:
    if not paths:
        return None
    alts = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
    # whole paths only: not inside a longer name or path, nor the path part of a URL (https://host/app)
    return re.compile(f"(?<![A-Za-z0-9._~/-])(?:{alts})(?![A-Za-z0-9._-])")


def hide_paths(obj: Any, paths: Mapping[str, str]) -> Any:
    """``obj`` (a string, or a config of nested dicts and lists) with every local path in its public form."""
    pat = _pattern(paths)
    if pat is None:
        return obj

    def one(x: Any) -> Any:
        if isinstance(x, str):
            return pat.sub(lambda m: paths[m.group(0)], x)
        if isinstance(x, Mapping):
            return {k: one(v) for k, v in x.items()}
        if isinstance(x, list):
            return [one(v) for v in x]
        return x

    return one(obj)


def hide_paths_in_folder(folder: str | Path, paths: Mapping[str, str]) -> list[str]:
    """Rewrite every text file under ``folder`` with local paths in their public form; returns the files changed."""
    pat = _pattern(paths)
    changed: list[str] = []
    if pat is None:
        return changed
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            text = p.read_text(encoding="utf-8")
            new = pat.sub(lambda m: paths[m.group(0)], text)
            if new != text:
                p.write_text(new, encoding="utf-8")
                changed.append(str(p.relative_to(folder)))
    return changed


def find_local_paths(folder: str | Path, paths: Mapping[str, str]) -> list[str]:
    """Files under ``folder`` (text files, and parquet string values and schema metadata) that still
    name one of ``paths``."""
    pat = _pattern(paths)
    if pat is None:
        return []
    found = []
    for p in sorted(Path(folder).rglob("*")):
        if not p.is_file():
            continue
        if p.suffix.lower() in TEXT_SUFFIXES:
            if pat.search(p.read_text(encoding="utf-8", errors="replace")):
                found.append(str(p.relative_to(folder)))
        elif p.suffix.lower() == ".parquet" and _parquet_names(p, paths, pat):
            found.append(str(p.relative_to(folder)))
    return found


def _string_arrays(arr) -> Iterable[Any]:
    import pyarrow as pa

    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        yield arr
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _string_arrays(arr.field(i))
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        yield from _string_arrays(arr.flatten())


def _parquet_names(path: Path, paths: Mapping[str, str], pat: re.Pattern) -> bool:
    """Whether a parquet file's schema metadata or any string value names one of ``paths`` (vectorised:
    arrow's substring search per column and row group, the exact pattern only on the values it finds)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    if any(pat.search(v.decode("utf-8", "replace")) for v in (f.schema_arrow.metadata or {}).values()):
        return True
    for g in range(f.num_row_groups):
        for col in f.read_row_group(g).columns:
            for arr in _string_arrays(col.combine_chunks()):
                for p in paths:
                    hit = pc.match_substring(arr, p)
                    if pc.any(hit).as_py() and any(pat.search(v) for v in arr.filter(hit).to_pylist() if v):
                        return True
    return False


def parquet_strings(path: str | Path) -> Iterable[str]:
    """Every string of a parquet file: its schema metadata and every string value of every column
    (struct fields and lists included; binary image bytes excluded), one row group at a time."""
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    for v in (f.schema_arrow.metadata or {}).values():
        yield v.decode("utf-8", "replace")

    for g in range(f.num_row_groups):
        for col in f.read_row_group(g).columns:
            for arr in _string_arrays(col.combine_chunks()):
                yield from (v for v in arr.to_pylist() if v)
