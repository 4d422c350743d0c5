"""What the tests share, and the one place they import it from: no file under tests/ imports a test
module or a conftest (tests/test_test_layout.py holds that). Fixtures defined here reach the tests
through tests/conftest.py and tests/faults/conftest.py, which import them.

- ``world``: a server in a test — a database, an in-process server, teams' tokens, scripted
  bridges over real WebSockets, and the waits on a run (``wait_run``, ``until``).
- ``databases``: a fresh SQLite file or PostgreSQL schema (``database_url``).
- ``servers``: ``mpe serve`` as a process of its own (``free_port``, ``start_server``), bridges
  served until a run ends (``serve``), and the check that an attempt's recording is whole.
- ``cli``: ``mpe`` run as a subprocess.
- ``browser``: headless Chromium (``needs_browser``) on a page signed in with a token (``signed_in``).
- ``audio``: speech synthesized once per session; placing and trimming clips.
- ``suites``: the mini suite (``build_mini_suite``) and the built-in suites voiced once per session.
- ``plugins``: the registration line of the test benchmark plug-in (tests/beepbench/).
- ``context``, ``mtr``, ``scoring``, ``dataset``, ``fuzz``, ``moshi``: the shared parts of those tests;
  ``qwen3_asr``: a tiny random Qwen3-ASR checkpoint of transformers' own classes.
- ``faults``: the fault tests' own PostgreSQL (``own_postgres``) and outage helpers; ``netproxy``: a
  loopback proxy that impairs a connection.
- ``anthropic_peer`` and ``peers/``: local servers speaking the Messages API and the model services
  the external bridges talk to, and the helpers of the endpoint-bridge tests (``peers/peer_tools``);
  ``llm_peers``: ``LLMPeer`` (the HTTP server, reply script and request log all three LLM peers share)
  and local servers speaking OpenAI's Chat Completions and Gemini's ``generateContent``.
"""
