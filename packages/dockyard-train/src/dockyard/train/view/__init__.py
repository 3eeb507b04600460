"""``dockyard view``: a local, read-only web page over runs' metrics and rollout logs.

:mod:`.data` finds runs and reads their files, :mod:`.server` is the FastAPI app and its
loopback guard, ``static/`` the page (``app.js``: vanilla JS rendering every trajectory text as
text) and ``static/vendor/`` its bundled libraries (uPlot, Grid.js, diff2html; versions and
licences in ``VENDOR.md``, fetched by ``scripts/vendor_viewer_assets.sh``).
"""
