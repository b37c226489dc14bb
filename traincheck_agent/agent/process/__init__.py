"""Process-level facts and hooks: the process's role, its rank and launcher, its
process groups, and what runs at exit, on signals and across fork."""
