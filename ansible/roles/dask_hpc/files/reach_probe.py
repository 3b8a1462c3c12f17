"""Read-only check, run on each node by the dask_hpc role before any change: can this node reach
what it will download from? Prints JSON {"problems": [one line each]}.

argv[1]: JSON {"host": inventory name, "index": true when pip will use a package index,
"default_index": pip's default index URL (read from the controller's pip), "find_links": [paths
or URLs], "urls": [{"url": ..., "what": ...}], "timeout": seconds}.

The node has no pip yet (the role makes the virtual environment later), so its pip settings are
read here as pip reads them: the configuration files (global, then the user's; [install] over
[global]), then PIP_* variables. The page fetched is the index's page for ``distributed``.
"""

from __future__ import annotations

import configparser
import json
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request

PROJECT = "distributed"  # a dependency every installation downloads


def pip_files() -> list[str]:
    """pip's configuration files, lowest priority first (pip's own order, without a venv)."""
    home = os.path.expanduser("~")
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    xdg_home = os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
    files = [os.path.join(d, "pip", "pip.conf") for d in reversed(xdg_dirs)] + ["/etc/pip.conf"]
    files += [os.path.join(home, ".pip", "pip.conf"), os.path.join(xdg_home, "pip", "pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    return files


def pip_settings() -> dict[str, tuple[str, str]]:
    """name -> (value, where it was set) for the settings that decide the download."""
    settings: dict[str, tuple[str, str]] = {}
    for name in pip_files():
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(name):
                continue
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    settings[key.replace("_", "-")] = (value.strip(), name)
    for key, value in os.environ.items():
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE":
            settings[key[4:].lower().replace("_", "-")] = (value.strip(), key)
    return settings


def _true(value: str) -> bool:
    return value.lower() in ("1", "true", "yes", "on")


def fetch(url: str, settings: dict[str, tuple[str, str]], timeout: float) -> str | None:
    """None if url answers (an HTTP status below 500 but 404; a path that exists), else why not."""
    if "://" not in url:
        return None if os.path.exists(url) else "no such file or directory"
    context = ssl.create_default_context()
    cert = settings.get("cert")
    if cert:
        try:
            context = ssl.create_default_context(cafile=cert[0])
        except OSError as e:
            return f"cannot read pip's cert {cert[0]} ({cert[1]}): {e.strerror}"
    host = urllib.parse.urlsplit(url).hostname or ""
    trusted = settings.get("trusted-host", ("", ""))[0].split()
    if host in trusted:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
    if settings.get("proxy"):
        proxy = settings["proxy"][0]
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=timeout):
            return None
    except urllib.error.HTTPError as e:
        if e.code < 500 and e.code != 404:
            return None  # it answers (a registry's /v2/ says 401): credentials are not ours to test
        return f"HTTP {e.code} {e.reason}"
    except urllib.error.URLError as e:
        reason = e.reason
        return str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as e:
        return str(e)


def problems(request: dict) -> list[str]:
    host, timeout = request["host"], float(request.get("timeout", 15))
    settings = pip_settings()
    found = []
    offline = settings.get("no-index") and _true(settings["no-index"][0])
    if request.get("index") and not offline:
        url, where = settings.get("index-url", (request["default_index"], "pip's default"))
        page = url.rstrip("/") + f"/{PROJECT}/"
        why = fetch(page, settings, timeout)
        if why:
            found.append(
                f"{host} cannot reach the package index {url} ({where}): {why}. Fix the node's "
                "network or its pip settings (index-url, cert, proxy in /etc/pip.conf), or "
                "install from a wheelhouse the nodes can read: dask_hpc_python_find_links with "
                "dask_hpc_python_offline=true."
            )
    for link in request.get("find_links", []):
        why = fetch(link, settings, timeout)
        if why:
            found.append(
                f"{host} cannot read the wheelhouse {link} (dask_hpc_python_find_links): {why}. "
                "Put it where every node can read it (the shared file system), or fix the entry."
            )
    for item in request.get("urls", []):
        why = fetch(item["url"], settings, timeout)
        if why:
            found.append(
                f"{host} cannot reach {item['url']} ({item['what']}): {why}. Fix the node's "
                "network or the address."
            )
    return found


def main() -> None:
    print(json.dumps({"problems": problems(json.loads(sys.argv[1]))}))


if __name__ == "__main__":
    main()
