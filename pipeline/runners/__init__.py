"""Runner-specific code: fixes for Beam runners, never in stages/ (a stage that needs runner-specific code leans
on a behaviour Beam does not promise)."""
