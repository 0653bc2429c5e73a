import MoonbaseAPI
import MoonbaseCore
import MoonbaseHost

#if canImport(Glibc)
import Glibc
#endif

// `moonbase VERB [options]`: verbs map to small command functions in MoonbaseHost; a
// `UsageError` exits 2, any other failure exits 1.
Signals.block()
let argv = Array(CommandLine.arguments.dropFirst())
let code = Commands.run(argv)
exit(code)
