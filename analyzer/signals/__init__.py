"""What to read: the signal catalogue, its queries and recording rules, the sources and stock inputs."""
