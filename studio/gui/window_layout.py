"""The studio window's layout and menus: the single-take view (voice | text and preview | takes and GPU)
and the Script view, switched by tabs in the menu bar, the first-run page beside them, the engine status in the status bar."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QScrollArea, QSplitter, QStackedWidget, QTabBar, QVBoxLayout, QWidget


def build_layout(window) -> None:
    voice_scroll = QScrollArea()
    voice_scroll.setWidget(window.voice_panel)
    voice_scroll.setWidgetResizable(True)
    voice_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
    voice_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # D9: it fits
    bar = voice_scroll.verticalScrollBar().sizeHint().width()
    voice_scroll.setMinimumWidth(max(330, window.voice_panel.minimumSizeHint().width() + bar + 4))
    center = QSplitter(Qt.Orientation.Vertical)
    center.addWidget(window.text_panel)
    center.addWidget(window.preview)
    center.setStretchFactor(0, 3)
    center.setStretchFactor(1, 2)
    right = QSplitter(Qt.Orientation.Vertical)
    right.addWidget(window.takes_panel)
    right.addWidget(window.gpu_panel)
    right.setStretchFactor(0, 3)
    right.setStretchFactor(1, 1)
    right.setSizes([750, 250])  # proportions: the takes and their details get most of the height
    splitter = QSplitter(Qt.Orientation.Horizontal)
    splitter.addWidget(voice_scroll)
    splitter.addWidget(center)
    splitter.addWidget(right)
    splitter.setStretchFactor(0, 2)
    splitter.setStretchFactor(1, 4)
    splitter.setStretchFactor(2, 3)
    splitter.setSizes([330, 620, 460])
    window.views = QStackedWidget()
    window.views.addWidget(splitter)
    window.views.addWidget(window.script_view)
    window.view_tabs = (
        QTabBar()
    )  # in the menu bar's corner: the views cost no height (the studio fits 720 px)
    window.view_tabs.setDrawBase(False)
    window.view_tabs.setExpanding(False)
    window.view_tabs.addTab("Single take")
    window.view_tabs.addTab("Script")
    window.view_tabs.currentChanged.connect(window.views.setCurrentIndex)
    window.views.currentChanged.connect(window.view_tabs.setCurrentIndex)
    window.menuBar().setCornerWidget(window.view_tabs, Qt.Corner.TopRightCorner)
    window.studio_page = QWidget()
    QVBoxLayout(window.studio_page).addWidget(window.views)
    window.pages = QStackedWidget()
    window.pages.addWidget(window.first_run)
    window.pages.addWidget(window.studio_page)
    window.setCentralWidget(window.pages)
    window.statusBar().addPermanentWidget(window.engine_status, 1)


def build_menus(window) -> None:
    file_menu = window.menuBar().addMenu("&File")
    window.import_action = QAction("&Import voice…", window, shortcut=QKeySequence.StandardKey.Open)
    window.import_action.triggered.connect(window.voice_panel.choose_file)
    window.export_action = QAction("&Export selected takes…", window, shortcut=QKeySequence("Ctrl+E"))
    window.export_action.triggered.connect(lambda: window.takes_panel.export_selected())
    window.open_script_action = QAction("Open &script…", window, shortcut=QKeySequence("Ctrl+Shift+O"))
    window.open_script_action.triggered.connect(window.open_script)
    window.settings_action = QAction("&Settings…", window, shortcut=QKeySequence("Ctrl+,"))
    window.settings_action.triggered.connect(window.open_settings)
    quit_action = QAction("&Quit", window, shortcut=QKeySequence.StandardKey.Quit)
    quit_action.triggered.connect(window.close)
    for action in (
        window.import_action,
        window.export_action,
        window.open_script_action,
        window.settings_action,
        quit_action,
    ):
        file_menu.addAction(action)
    engine_menu = window.menuBar().addMenu("&Engine")
    window.restart_action = QAction("&Restart engine", window, shortcut=QKeySequence("Ctrl+R"))
    window.restart_action.triggered.connect(window.restart_engine)
    window.model_action = QAction("Choose &model…", window)
    window.model_action.triggered.connect(window.choose_model)
    engine_menu.addAction(window.restart_action)
    engine_menu.addAction(window.model_action)
    from studio.gui.help_menu import HelpMenu

    window.help = HelpMenu(window)
