use clap::Parser;

fn main() {
    zarrfs::sys::allocator::configure();
    // `zarrfs SOURCE DIR -o OPTIONS` (the FUSE mount helper's form) and `-o` lists become
    // ordinary arguments first.
    let argv = zarrfs::cli::mount_options::expand(std::env::args_os().collect(), &zarrfs::cli::mount_long_options());
    let argv = argv.unwrap_or_else(|message| {
        eprintln!("zarrfs: {message}");
        std::process::exit(2);
    });
    // The TLS client reads these when it connects, after the daemon has left the working
    // directory: a relative path would name another file by then. Set before any thread exists.
    for var in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
        let relative = std::env::var_os(var)
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_relative());
        if let Some(absolute) = relative.and_then(|p| std::path::absolute(p).ok()) {
            std::env::set_var(var, absolute);
        }
    }
    let cli = zarrfs::cli::Cli::parse_from(argv);
    std::process::exit(zarrfs::cli::run(cli));
}
