"""Deployment helpers: Apptainer definitions, image builds and batch scripts for each site."""
