"""A graphical desktop per sandbox session, and the guests an agent drives through one interface.

* ``actions`` / ``pyautogui``: OSWorld's action space (``computer_13``) and its ``pyautogui``-code
  form, validated into one small list of :class:`~dockyard.sandbox.desktop.actions.Action`
  (pure Python: the client and the service both use it).
* ``wire``: the request / observation models of the desktop routes.
* ``host`` / ``routes`` (service side): Xvfb + a window manager + applications in a long-lived
  jail of the session, actions executed with xdotool and screenshots taken in short jails.
* ``backend`` (client side): the :class:`DesktopBackend` interface with its two guests, the
  sandbox session's desktop and ``vnc`` (any VNC server: how Windows and macOS guests are reached).
"""
