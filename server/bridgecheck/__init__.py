"""The bridge conformance check (``mpe bridge check``, ``/v1/checks``).

A team's own bridge plays a tiny Duplex-MPE suite of probes in every clock it announces,
and the recorded attempts are judged for protocol conformance. Parts: ``suite`` (the probe
suite, voiced offline), ``evaluate`` (pure: recorded attempts in, a pass/fail report with
advice out), ``vocaltract`` (the apparent vocal-tract length of the bridge's speech, for the rate line), ``runs`` (the check's runs in the database and the report of their attempts), ``api``
(its routes, ``/v1/checks``).
"""
