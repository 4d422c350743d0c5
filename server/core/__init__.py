"""The pure core: time base, typed events, the scheduler contract, the speech detector,
the episode core (scheduler + detector + mixer) and realtime slot placement.

Nothing here reads a clock, a socket, a file of the project's or the database (DESIGN §11);
callers feed it bytes and stream time. It imports only ``clients`` (the wire constants).
"""
