"""The leaderboard of a challenger method against the papers' methods, torch-free but for
counting a run's FLOPs:

- `fedhet.leaderboard.rows`: a challenger's comparable tables as one row per run, with the
  table's scored metric and the run's costs (the ranking's input);
- `fedhet.leaderboard.ranking`: its rank, wins, ties and losses against each method per paper
  table, the overview of every entry, and their pages;
- `fedhet.leaderboard.plan`: what the leaderboards will train, said before anything does.

Which tables a challenger joins and the runs it adds are part of the experiment's expansion
(`fedhet.experiments.challengers`).
"""
