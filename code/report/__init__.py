"""The reproduction as pages: `pages` writes report/index.html and report.md from the scripts'
--json, `timeline` writes report/timeline.html, the handbook's interactive DDP timeline, from
timelines lecture15.timeline_grid precomputes (the page draws them; it holds no model)."""
