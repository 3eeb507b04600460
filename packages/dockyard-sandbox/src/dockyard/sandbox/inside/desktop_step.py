"""One desktop step, run inside a short jail of the session (its uid, no network).

Argument 1 is JSON from the service: ``launch`` (shell commands handed to the desktop jail's
spool: processes started here would die with this jail), ``cmds`` (xdotool argument lists, or
``{"sleep": s}``), ``wait`` (settle seconds), ``shot`` (take a screenshot), ``size`` (scale it
to (w, h)), ``windows`` (list visible windows). Prints one JSON object: ``png_b64``, ``size``,
``windows``, ``active_title``, ``errors``. Standalone (started with ``-I -S``): it imports only
the standard library and Pillow from the service's site-packages.
"""

import base64
import io
import json
import os
import subprocess
import sys
import time

sys.path.extend(p for p in os.environ.get("DOCKYARD_SITE", "").split(":") if p)

SPOOL = "/tmp/.X11-unix/launch"


def xdo(*args, timeout=10.0):
    r = subprocess.run(["xdotool", *args], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr.strip()


def launch(cmds):
    for i, c in enumerate(cmds):
        tmp = f"{SPOOL}/.{os.getpid()}-{i}.tmp"
        with open(tmp, "w") as f:
            f.write(c)
        os.rename(tmp, f"{SPOOL}/{time.time_ns()}-{i}.sh")


def windows():
    _rc, out, _ = xdo("search", "--onlyvisible", "--name", "")
    found = []
    for wid in out.split()[:64]:
        rc1, title, _ = xdo("getwindowname", wid)
        # xwininfo's absolute corner: xdotool's geometry counts a reparenting WM's frame twice
        geo = subprocess.run(["xwininfo", "-id", wid], capture_output=True, text=True)
        if rc1 or geo.returncode:
            continue
        g = {}
        for line in geo.stdout.splitlines():
            k, _, v = line.strip().partition(":")
            if k in ("Absolute upper-left X", "Absolute upper-left Y", "Width", "Height"):
                g[k.split()[-1]] = int(v)
        w, h = g.get("Width", 0), g.get("Height", 0)
        if w <= 1 or h <= 1:
            continue
        cls = subprocess.run(["xprop", "-id", wid, "WM_CLASS"], capture_output=True, text=True)
        if cls.returncode != 0 or "=" not in cls.stdout:
            continue  # not an application's window (the window manager's frames)
        wm_class = cls.stdout.split("=", 1)[1].strip().replace('"', "")
        found.append({
            "id": int(wid), "title": title.rstrip("\n"), "wm_class": wm_class,
            "x": g.get("X", 0), "y": g.get("Y", 0), "width": w, "height": h,
        })  # fmt: skip
    return found


def main():
    req = json.loads(sys.argv[1])
    errors = []
    for _ in range(300 if req.get("await_ready") else 0):  # a new display: up to 30 s
        if os.path.exists("/tmp/.X11-unix/ready"):
            break
        time.sleep(0.1)
    launch(req.get("launch", []))
    for c in req.get("cmds", []):
        if isinstance(c, dict):
            time.sleep(float(c["sleep"]))
            continue
        try:
            rc, _, err = xdo(*c)
        except subprocess.TimeoutExpired:
            rc, err = -1, "timed out"
        if rc != 0:
            errors.append(f"xdotool {c[0]}: {err or f'exit {rc}'}")
    time.sleep(float(req.get("wait", 0)))
    out = {"errors": errors, "png_b64": "", "size": None, "windows": [], "active_title": ""}
    rc, title, _ = xdo("getactivewindow", "getwindowname")
    out["active_title"] = title.rstrip("\n") if rc == 0 else ""
    if req.get("windows"):
        out["windows"] = windows()
    if req.get("shot"):
        # lazy: Pillow (the desktop extra, on DOCKYARD_SITE) only for a step that takes a shot
        from PIL import Image, ImageGrab

        im = ImageGrab.grab(xdisplay=os.environ["DISPLAY"])
        if req.get("size"):
            im = im.resize(tuple(req["size"]), Image.Resampling.BILINEAR)
        buf = io.BytesIO()
        im.convert("RGB").save(buf, "PNG", compress_level=3)
        out["png_b64"] = base64.b64encode(buf.getvalue()).decode()
        out["size"] = list(im.size)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
