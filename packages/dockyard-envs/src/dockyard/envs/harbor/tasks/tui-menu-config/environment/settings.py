"""Settings editor for config.json (a full-screen curses program; it needs a terminal).

Keys: Up/Down move between rows; Left/Right change the value of a choice, number or on/off row
(Space also toggles on/off); Enter on "Username" edits it (type the new name, Enter to accept);
Enter on "Save" writes config.json and exits; Enter on "Quit" (or q) exits without saving.
"Autosave every" can only be changed while Autosave is on.

config.json is written only by Save, signed with the key in .settings-key.
"""

import curses
import hashlib
import hmac
import json
import sys

THEMES = ["light", "dark", "solarized", "high-contrast"]
LANGUAGES = ["en", "de", "fr", "ja"]
ROWS = [
    "theme",
    "font_size",
    "autosave",
    "autosave_minutes",
    "language",
    "username",
    "Save",
    "Quit",
]
LABELS = {
    "theme": "Theme",
    "font_size": "Font size",
    "autosave": "Autosave",
    "autosave_minutes": "Autosave every (min)",
    "language": "Language",
    "username": "Username",
    "Save": "[ Save ]",
    "Quit": "[ Quit ]",
}


def sign(cfg: dict) -> str:
    with open(".settings-key") as f:
        key = f.read().strip().encode()
    body = json.dumps({k: v for k, v in cfg.items() if k != "signature"}, sort_keys=True)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def enabled(cfg: dict, row: str) -> bool:
    return row != "autosave_minutes" or cfg["autosave"]


def change(cfg: dict, row: str, d: int) -> None:
    if row == "theme":
        cfg["theme"] = THEMES[(THEMES.index(cfg["theme"]) + d) % len(THEMES)]
    elif row == "language":
        cfg["language"] = LANGUAGES[(LANGUAGES.index(cfg["language"]) + d) % len(LANGUAGES)]
    elif row == "font_size":
        cfg["font_size"] = min(32, max(8, cfg["font_size"] + d))
    elif row == "autosave_minutes":
        cfg["autosave_minutes"] = min(60, max(1, cfg["autosave_minutes"] + d))
    elif row == "autosave":
        cfg["autosave"] = not cfg["autosave"]


def show(cfg: dict, row: str) -> str:
    v = cfg[row]
    if row == "autosave":
        return "on" if v else "off"
    if row == "autosave_minutes" and not cfg["autosave"]:
        return f"{v} (disabled)"
    return str(v)


def main(scr: "curses.window") -> str:
    curses.curs_set(0)
    with open("config.json") as f:
        cfg = json.load(f)
    sel = 0
    msg = ""
    while True:
        scr.erase()
        scr.addstr(0, 0, "SETTINGS  -  Up/Down move, Left/Right change, Enter select, q quit")
        for i, row in enumerate(ROWS):
            mark = "> " if i == sel else "  "
            line = LABELS[row] if row in ("Save", "Quit") else f"{LABELS[row]:<22}{show(cfg, row)}"
            scr.addstr(2 + i, 2, mark + line)
        scr.addstr(2 + len(ROWS) + 1, 2, msg)
        scr.refresh()
        key = scr.getch()
        row = ROWS[sel]
        msg = ""
        if key == curses.KEY_UP:
            sel = (sel - 1) % len(ROWS)
            while not enabled(cfg, ROWS[sel]):
                sel = (sel - 1) % len(ROWS)
        elif key == curses.KEY_DOWN:
            sel = (sel + 1) % len(ROWS)
            while not enabled(cfg, ROWS[sel]):
                sel = (sel + 1) % len(ROWS)
        elif key in (curses.KEY_LEFT, curses.KEY_RIGHT) and row not in ("Save", "Quit", "username"):
            change(cfg, row, -1 if key == curses.KEY_LEFT else 1)
        elif key == ord(" ") and row == "autosave":
            change(cfg, row, 1)
        elif key in (ord("q"), ord("Q")):
            return "quit without saving"
        elif key in (10, 13, curses.KEY_ENTER):
            if row == "Quit":
                return "quit without saving"
            if row == "Save":
                cfg["signature"] = sign(cfg)
                with open("config.json", "w") as f:
                    f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
                return "saved config.json"
            if row == "username":
                scr.addstr(2 + len(ROWS) + 1, 2, "New username: ")
                curses.echo()
                curses.curs_set(1)
                name = scr.getstr(2 + len(ROWS) + 1, 16, 30).decode(errors="replace").strip()
                curses.noecho()
                curses.curs_set(0)
                if name:
                    cfg["username"] = name
                else:
                    msg = "username unchanged (empty)"


if __name__ == "__main__":
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.exit("settings: needs an interactive terminal (a TTY)")
    print(curses.wrapper(main))
