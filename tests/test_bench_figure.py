"""The benchmark's grid figure (report/bench.py): each cell shows its configuration's mean over
seeds, its std and n, and a cell without runs says why."""

import statistics
from pathlib import Path

import numpy as np

from arithrepro.report import bench, plotting


def test_the_grid_draws_each_cells_mean_std_and_n(tmp_path, monkeypatch):
    figures = []
    real = plotting.save
    monkeypatch.setattr(plotting, "save", lambda plt, fig, path: (figures.append(fig),
                                                                  real(plt, fig, path))[1])
    within, beyond = bench.SIDES
    entries = [
        {"task": "expr", "model": "gpt", "origin": "own",
         "values": {within: [0.9, 0.8, 0.7], beyond: [0.2, 0.1, 0.3]}},
        {"task": "expr", "model": "lstm", "origin": "bench", "values": {within: [0.5], beyond: [0.05]}},
        {"task": "looped", "model": "gpt", "origin": "", "values": {}},   # cannot take its samples
        {"task": "looped", "model": "lstm", "origin": "bench", "values": {}},   # not run yet
    ]
    path = bench.figure(entries, tmp_path / "grid.png")
    assert Path(path).is_file()
    (fig,) = figures
    for ax, side in zip(fig.axes[:2], (within, beyond)):
        shown = ax.get_images()[0].get_array()
        assert np.isclose(shown[0, 0], 100 * statistics.fmean(entries[0]["values"][side]))
        assert np.isclose(shown[0, 1], 100 * entries[1]["values"][side][0])
        assert np.ma.getmaskarray(shown)[1].all() or np.isnan(np.asarray(shown[1], float)).all()
        texts = [t.get_text() for t in ax.texts]
        sd = 100 * statistics.stdev(entries[0]["values"][side])
        assert f"{100 * statistics.fmean(entries[0]['values'][side]):.1f}\n± {sd:.1f}\nn 3" in texts
        assert f"{100 * entries[1]['values'][side][0]:.1f}\nn 1" in texts   # one seed: no std
        assert "cannot\nmeet" in texts and "not run" in texts
