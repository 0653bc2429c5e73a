import MoonbaseHost
print("moonbase")
