use clap::Parser;

fn main() {
    // `zarrfs SOURCE DIR -o OPTIONS` (the FUSE mount helper's form) and `-o` lists become
    // ordinary arguments first.
    let argv = zarrfs::mount_options::expand(std::env::args_os().collect(), &zarrfs::cli::mount_long_options());
    let argv = argv.unwrap_or_else(|message| {
        eprintln!("zarrfs: {message}");
        std::process::exit(2);
    });
    let cli = zarrfs::cli::Cli::parse_from(argv);
    std::process::exit(zarrfs::app::run(cli));
}
