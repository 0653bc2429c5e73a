// MoonbaseCron: see Package.swift and STYLE.md §2 for this module's role.
