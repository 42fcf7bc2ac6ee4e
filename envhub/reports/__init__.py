"""``envhub report``: one self-contained HTML file (plots inline and as PNGs beside it) for a
rollout or a training run. :mod:`.data` loads a run directory, :mod:`.plots` draws,
:mod:`.html` and :mod:`.training_html` render; :mod:`.transcript` escapes episodes for people."""
