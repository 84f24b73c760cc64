"""Figure kinds: what each kind of paper figure reads and which workflow script draws it
(`fedhet.figures.kinds`, torch-free)."""
