"""A tiny full-screen vault: arrow keys move, Enter chooses; Unlock asks for the PIN."""

import curses
import hashlib
import sys

ITEMS = ["Status", "Rotate keys", "Unlock", "Quit"]


def main(scr: "curses.window") -> str:
    curses.curs_set(0)
    sel = 0
    while True:
        scr.clear()
        scr.addstr(0, 0, "VAULT - arrows move, Enter chooses")
        for i, item in enumerate(ITEMS):
            scr.addstr(2 + i, 2, ("> " if i == sel else "  ") + item)
        scr.refresh()
        key = scr.getch()
        if key == curses.KEY_UP:
            sel = (sel - 1) % len(ITEMS)
        elif key == curses.KEY_DOWN:
            sel = (sel + 1) % len(ITEMS)
        elif key in (10, 13, curses.KEY_ENTER):
            if ITEMS[sel] == "Quit":
                return "bye"
            if ITEMS[sel] == "Unlock":
                curses.echo()
                scr.addstr(8, 0, "PIN: ")
                pin = scr.getstr(8, 5, 12).decode().strip()
                curses.noecho()
                with open("pin.txt") as f:
                    want = f.read().strip()
                if pin == want:
                    digest = hashlib.sha256(f"vault:{pin}".encode()).hexdigest()
                    with open("unlocked.txt", "w") as f:
                        f.write(digest + "\n")
                    return "unlocked"
                return "wrong PIN"
            scr.addstr(8, 0, f"{ITEMS[sel]}: nothing to do")


if __name__ == "__main__":
    if not sys.stdin.isatty():
        sys.exit("vault: needs a terminal (a TTY)")
    print(curses.wrapper(main))
