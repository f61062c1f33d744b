use clap::Parser;

fn main() {
    let cli = zarrfs::cli::Cli::parse();
    std::process::exit(zarrfs::app::run(cli));
}
