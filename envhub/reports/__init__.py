"""``envhub report``: one self-contained HTML file (plots inline and as PNGs beside it) for a
rollout or a training run. :mod:`.data` and :mod:`.training` load a run directory, :mod:`.plots` and
:mod:`.training_plots` draw, :mod:`.rollout_html` and :mod:`.training_html` hold the sections,
:mod:`.html` picks them by the run's kind and writes the page; :mod:`.transcript` escapes episodes
for people."""
