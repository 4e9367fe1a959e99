"""sgpo_select: the posterior chooses which prompts to roll out, before rolling out."""
