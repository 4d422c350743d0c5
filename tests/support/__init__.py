"""What the tests share, and the one place they import it from (a test module imports no other
test module; tests/test_test_layout.py holds that):

- ``world``: a server in a test — a database, an in-process server, teams' tokens, scripted
  bridges over real WebSockets, and the waits on a run (``wait_run``, ``until``).
- ``databases``: a fresh SQLite file or PostgreSQL schema (``database_url``).
- ``servers``: the server as its own process (``free_port``, ``start_server``), runs served in
  process (``serve``), and the recording check of an attempt.
- ``cli``: ``mpe`` run as a subprocess.
- ``browser``: headless Chromium (``needs_browser``), signed in (``signed_in``).
- ``audio``: speech synthesized once per session, placement and trimming of clips.
- ``suites``: the mini suite and the built-in suites voiced once per session (fixtures).
- ``context``, ``mtr``, ``scoring``, ``dataset``, ``fuzz``, ``moshi``: the shared parts of those
  tests; ``faults``: the fault tests' own PostgreSQL and outage helpers; ``netproxy``: an
  impairing loopback proxy.
- ``anthropic_peer`` and ``peers/``: local servers speaking the Messages API and the model
  servers the external bridges talk to (test code only).
"""
