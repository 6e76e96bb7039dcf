"""XProf's profile format alone (``<host>.xplane.pb``): its schema
(xplane.proto, generated xplane_pb2.py), one host's file read (xplane.py), its
programs' facts (programs.py) and its memory events as moments (timeline.py).
store/xprof.py reads a profile into the run model; nothing here imports jax,
pandas or anything above store."""
